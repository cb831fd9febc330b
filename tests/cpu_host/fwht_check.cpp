// tqgguf: ggml-cpu's Hadamard transform (MUL_MAT with GGML_HINT_SRC0_IS_HADAMARD, ggml_compute_forward_fwht; patch
// 0016 does its first stages in a register, ggml-turbo-fwht.h) against the transform written out here: each value
// times 1/sqrt(n), then the stages len = 1, 2, .., n/2 replacing x[j], x[j + len] (j & len == 0) by u + v and
// u - v. The two must agree bit for bit (compile this file with -ffp-contract=off).
//
//   fwht_check N N_ROWS N_THREADS
//
// Prints "OK <values>" or the first differing value and exits 1.
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s N N_ROWS N_THREADS\n", argv[0]);
        return 2;
    }
    const int n = atoi(argv[1]), nr = atoi(argv[2]), nth = atoi(argv[3]);
    if (n < 2 || (n & (n - 1)) != 0 || nr < 1 || nth < 1) {
        fprintf(stderr, "N a power of two >= 2, N_ROWS and N_THREADS >= 1\n");
        return 2;
    }
    ggml_init_params ip = { 8*ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * rot = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
    ggml_tensor * x   = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, nr);
    ggml_tensor * y   = ggml_mul_mat(ctx, rot, x);
    ggml_mul_mat_set_hint(y, GGML_HINT_SRC0_IS_HADAMARD);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
    ggml_backend_cpu_set_n_threads(be, nth);

    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> h((size_t) n*nr), r((size_t) n*nr), got((size_t) n*nr);
    for (size_t i = 0; i < h.size(); ++i) {
        h[i] = nd(rng) * std::ldexp(1.0f, (int) (rng() % 40) - 20);  // magnitudes 2^-20 .. 2^19: roundings everywhere
    }
    ggml_backend_tensor_set(x, h.data(), 0, ggml_nbytes(x));
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "compute failed\n");
        return 1;
    }
    ggml_backend_tensor_get(y, got.data(), 0, ggml_nbytes(y));

    const float scale = 1.0f / sqrtf((float) n);
    for (int row = 0; row < nr; ++row) {
        float * v = r.data() + (size_t) row*n;
        for (int j = 0; j < n; ++j) {
            v[j] = h[(size_t) row*n + j] * scale;
        }
        for (int len = 1; len < n; len <<= 1) {
            for (int i = 0; i < n; i += 2*len) {
                for (int j = i; j < i + len; ++j) {
                    const float u = v[j], w = v[j + len];
                    v[j]       = u + w;
                    v[j + len] = u - w;
                }
            }
        }
    }
    for (size_t i = 0; i < r.size(); ++i) {
        if (memcmp(&r[i], &got[i], sizeof(float)) != 0) {
            printf("row %zu value %zu: %.9g, the loop gives %.9g\n", i / n, i % n, got[i], r[i]);
            return 1;
        }
    }
    printf("OK %zu\n", r.size());
    ggml_backend_buffer_free(buf);
    ggml_backend_free(be);
    ggml_free(ctx);
    return 0;
}
