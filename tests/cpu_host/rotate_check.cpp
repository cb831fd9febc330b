// tqgguf: Q, K and V rotated in one CPU node (native/src/llama-tq-rotate.cpp, llama_tq_rotate_qkv) against
// upstream's three nodes (MUL_MAT with GGML_HINT_SRC0_IS_HADAMARD, which ggml's CPU backend runs as its fast
// Walsh-Hadamard transform), both in one graph on the engine's own libraries, and against H_n x / sqrt(n) in
// double precision. Q is a strided view (every other head of a wider tensor), as a view of a fused QKV
// projection would be.
//
//   rotate_check D N_HEAD N_HEAD_KV N_TOK N_K N_V N_THREADS
//
// Prints the number of values that differ in their bits from upstream's nodes and the largest error
// against double precision relative to the largest |value|; exits 1 on a shape or compute failure.
#include "ggml.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

ggml_tensor * llama_tq_rotate_qkv(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                  ggml_tensor * rot_k, ggml_tensor * rot_v);
ggml_tensor * llama_tq_rotated_part(ggml_context * ctx, ggml_tensor * qkv, ggml_tensor * q, ggml_tensor * k, int part);

// H_n / sqrt(n), the Sylvester construction: H[i][j] = (-1)^popcount(i & j)
static void hadamard(float * h, int n) {
    for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
            h[i*n + j] = (__builtin_popcount(i & j) % 2 ? -1.0f : 1.0f)/sqrtf((float) n);
        }
    }
}

// upstream's rotation of x [D, heads, n_tok] in groups of n (llama_mul_mat_hadamard's graph)
static ggml_tensor * upstream_rot(ggml_context * ctx, ggml_tensor * x, ggml_tensor * rot) {
    const int64_t n = rot->ne[0];
    ggml_tensor * c = ggml_is_contiguous(x) ? ggml_reshape_2d(ctx, x, n, ggml_nelements(x)/n) : ggml_cont_2d(ctx, x, n, ggml_nelements(x)/n);
    ggml_tensor * r = ggml_mul_mat(ctx, rot, c);
    ggml_mul_mat_set_hint(r, GGML_HINT_SRC0_IS_HADAMARD);
    return ggml_reshape_3d(ctx, r, x->ne[0], x->ne[1], x->ne[2]);
}

int main(int argc, char ** argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s D N_HEAD N_HEAD_KV N_TOK N_K N_V N_THREADS\n", argv[0]);
        return 2;
    }
    const int D = atoi(argv[1]), nh = atoi(argv[2]), nkv = atoi(argv[3]), nt = atoi(argv[4]);
    const int nk = atoi(argv[5]), nv = atoi(argv[6]), nth = atoi(argv[7]);
    ggml_init_params ip = { (size_t) 4*(8*D*(2*nh + 2*nkv)*nt + nk*nk + nv*nv) + (16u << 20), nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * qw = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, 2*nh, nt);  // q = every other head of it
    ggml_tensor * k  = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, nkv, nt);
    ggml_tensor * v  = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, nkv, nt);
    ggml_tensor * rk = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nk, nk);
    ggml_tensor * rv = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nv, nv);
    hadamard((float *) rk->data, nk);
    hadamard((float *) rv->data, nv);
    std::mt19937 rng(22);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (ggml_tensor * t : { qw, k, v }) {
        for (int64_t i = 0; i < ggml_nelements(t); ++i) {
            ((float *) t->data)[i] = nd(rng);
        }
    }
    ggml_tensor * q = ggml_view_3d(ctx, qw, D, nh, nt, 2*qw->nb[1], qw->nb[2], 0);
    ggml_tensor * qkv = llama_tq_rotate_qkv(ctx, q, k, v, rk, rv);
    ggml_tensor * got[3] = { llama_tq_rotated_part(ctx, qkv, q, k, 0), llama_tq_rotated_part(ctx, qkv, q, k, 1),
                             llama_tq_rotated_part(ctx, qkv, q, k, 2) };
    ggml_tensor * ref[3] = { upstream_rot(ctx, q, rk), upstream_rot(ctx, k, rk), upstream_rot(ctx, v, rv) };
    ggml_cgraph * gf = ggml_new_graph(ctx);
    for (int p = 0; p < 3; ++p) {
        ggml_build_forward_expand(gf, got[p]);
        ggml_build_forward_expand(gf, ref[p]);
    }
    if (ggml_graph_compute_with_ctx(ctx, gf, nth) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        return 1;
    }
    if (qkv->ne[0] != D || qkv->ne[1] != nh + 2*nkv || qkv->ne[2] != nt) {
        fprintf(stderr, "shape [%lld, %lld, %lld]\n", (long long) qkv->ne[0], (long long) qkv->ne[1], (long long) qkv->ne[2]);
        return 1;
    }
    const ggml_tensor * src[3] = { q, k, v };
    long long n_diff = 0;
    double err = 0.0, amax = 0.0;
    for (int p = 0; p < 3; ++p) {
        const int n = p == 2 ? nv : nk;
        for (int t = 0; t < nt; ++t) {
            for (int h = 0; h < got[p]->ne[1]; ++h) {
                const float * g = (const float *) ((const char *) got[p]->data + h*got[p]->nb[1] + t*got[p]->nb[2]);
                const float * r = (const float *) ((const char *) ref[p]->data + h*ref[p]->nb[1] + t*ref[p]->nb[2]);
                const float * x = (const float *) ((const char *) src[p]->data + h*src[p]->nb[1] + t*src[p]->nb[2]);
                for (int i = 0; i < D; ++i) {
                    n_diff += memcmp(g + i, r + i, sizeof(float)) != 0;
                    const int g0 = i / n * n, ii = i % n;
                    double s = 0.0;
                    for (int j = 0; j < n; ++j) {
                        s += (__builtin_popcount(ii & j) % 2 ? -1.0 : 1.0) * x[g0 + j];
                    }
                    s /= std::sqrt((double) n);
                    err  = std::max(err, std::fabs(g[i] - s));
                    amax = std::max(amax, std::fabs(s));
                }
            }
        }
    }
    printf("%lld %.3e\n", n_diff, err/amax);
    ggml_free(ctx);
    return 0;
}
