// tqgguf: ggml's CPU SET_ROWS into a turbo tensor (patch 0014: fewer rows than threads split each row's
// blocks over the threads) against the codec's row encoder (quantize_row_turboN_0, ggml-turbo.h) applied to
// each row alone: the destination rows must hold the same bytes, the rows not written their old bytes.
//
//   set_rows_check TYPE N_COLS N_ROWS N_THREADS      TYPE: turbo4_0, turbo3_0 or turbo2_0
//
// Writes N_ROWS rows of N_COLS Gaussian values (as a decode step writes one token's K: N_ROWS = 1) at scattered
// row indices of a 16-row destination. Prints "OK <bytes compared>" or the first differing byte and exits 1.
#include "ggml.h"
#include "ggml-cpu.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
void quantize_row_turbo4_0(const float * x, void * y, int64_t k);
void quantize_row_turbo3_0(const float * x, void * y, int64_t k);
void quantize_row_turbo2_0(const float * x, void * y, int64_t k);
}

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s TYPE N_COLS N_ROWS N_THREADS\n", argv[0]);
        return 2;
    }
    const std::string tn = argv[1];
    const int nc = atoi(argv[2]), nr = atoi(argv[3]), nth = atoi(argv[4]), n_dst = 16;
    ggml_type type;
    void (*encode)(const float *, void *, int64_t);
    if (tn == "turbo4_0") { type = GGML_TYPE_TURBO4_0; encode = quantize_row_turbo4_0; }
    else if (tn == "turbo3_0") { type = GGML_TYPE_TURBO3_0; encode = quantize_row_turbo3_0; }
    else if (tn == "turbo2_0") { type = GGML_TYPE_TURBO2_0; encode = quantize_row_turbo2_0; }
    else { fprintf(stderr, "TYPE %s: expected turbo4_0, turbo3_0 or turbo2_0\n", tn.c_str()); return 2; }
    if (nr < 1 || nr > n_dst || nc % 64 != 0) {
        fprintf(stderr, "N_ROWS must be 1..%d and N_COLS a multiple of 64\n", n_dst);
        return 2;
    }
    ggml_init_params ip = { (size_t) (8*nc*(nr + n_dst) + (16u << 20)), nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * src = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nc, nr);
    ggml_tensor * idx = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, nr);
    ggml_tensor * dst = ggml_new_tensor_2d(ctx, type, nc, n_dst);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int i = 0; i < nc*nr; ++i) {
        ((float *) src->data)[i] = nd(rng) * (1.0f + (i / 64) % 5);  // blocks of different sizes
    }
    for (int r = 0; r < nr; ++r) {
        ((int64_t *) idx->data)[r] = (5*r + 3) % n_dst;
    }
    std::vector<uint8_t> before(ggml_nbytes(dst));
    for (size_t i = 0; i < before.size(); ++i) {
        before[i] = (uint8_t) (i*131 + 17);
    }
    memcpy(dst->data, before.data(), before.size());
    ggml_tensor * out = ggml_set_rows(ctx, dst, src, idx);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    if (ggml_graph_compute_with_ctx(ctx, gf, nth) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        return 1;
    }
    std::vector<uint8_t> want = before;
    const size_t rs = ggml_row_size(type, nc);
    for (int r = 0; r < nr; ++r) {
        encode((const float *) src->data + (size_t) r*nc, want.data() + ((5*r + 3) % n_dst)*rs, nc);
    }
    const uint8_t * got = (const uint8_t *) out->data;
    for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] != want[i]) {
            fprintf(stderr, "byte %zu (row %zu, byte %zu of it): got %u, want %u\n", i, i / rs, i % rs, got[i], want[i]);
            return 1;
        }
    }
    printf("OK %zu\n", want.size());
    ggml_free(ctx);
    return 0;
}
