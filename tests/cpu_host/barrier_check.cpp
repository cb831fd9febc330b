// tqgguf: ggml-cpu's graph loop without the barriers ggml-turbo-barrier.h leaves out (patch 0015), on a decode
// step's attention inputs as llama-graph builds them for a rotated turbo4 cache: Q, K, V projections of one token,
// RoPE of Q and K, the Hadamard transform of Q, K and V (MUL_MAT with GGML_HINT_SRC0_IS_HADAMARD), K's and V's
// cache writes (SET_ROWS into turbo4), in llama-graph's order (Q, V, K, then the writes), the memory laid out by
// ggml's graph allocator (which puts a transform's output on the projection it no longer needs).
//
//   barrier_check HEAD_DIM N_HEAD N_HEAD_KV N_THREADS ITERS [F16_V]
//
// F16_V = 1: V reaches its cache write as F16 (a cast before K's nodes), so that write converts through a slice of
// the work buffer per thread and must keep the barrier after K's write.
//
// Prints the node pairs whose barrier the loop leaves out with N_THREADS threads ("skip OP->OP" lines, in graph
// order), then computes the graph ITERS times with random inputs, token position and cache row, on N_THREADS
// threads and on one, and compares the transformed Q and both caches byte for byte: "OK <iters>", or the first
// difference and exit 1.
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-turbo-barrier.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

static ggml_tensor * hadamard(ggml_context * ctx, ggml_tensor * cur, ggml_tensor * rot) {  // as llama_mul_mat_hadamard
    ggml_tensor * r = ggml_reshape_2d(ctx, cur, rot->ne[0], ggml_nelements(cur) / rot->ne[0]);
    r = ggml_mul_mat(ctx, rot, r);
    ggml_mul_mat_set_hint(r, GGML_HINT_SRC0_IS_HADAMARD);
    return ggml_reshape_3d(ctx, r, cur->ne[0], cur->ne[1], cur->ne[2]);
}

int main(int argc, char ** argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s HEAD_DIM N_HEAD N_HEAD_KV N_THREADS ITERS [F16_V]\n", argv[0]);
        return 2;
    }
    const int d = atoi(argv[1]), nh = atoi(argv[2]), nkv = atoi(argv[3]), nth = atoi(argv[4]), iters = atoi(argv[5]);
    const bool f16_v = argc == 7 && atoi(argv[6]) != 0;
    const int n_embd = 256, n_cells = 16;
    if (d % 64 != 0 || (d & (d - 1)) != 0 || nh < 1 || nkv < 1 || nh % nkv != 0 || nth < 1 || iters < 1) {
        fprintf(stderr, "HEAD_DIM a power of two >= 64, N_HEAD a multiple of N_HEAD_KV, N_THREADS, ITERS >= 1\n");
        return 2;
    }

    // the weights, inputs and caches in a buffer of their own (as a model's and a KV cache's: the graph allocator
    // frees what it allocated once its last reader has run), the graph's nodes where the graph allocator puts them
    ggml_init_params ip = { 64*ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
    ggml_context * cw  = ggml_init(ip);
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * x    = ggml_new_tensor_1d(cw, GGML_TYPE_F32, n_embd);
    // q8_0 weights, as a model's: an F32 mat-mul's sums depend on the thread count (its tiles), a quantized one's do not
    ggml_tensor * wq   = ggml_new_tensor_2d(cw, GGML_TYPE_Q8_0, n_embd, d*nh);
    ggml_tensor * wk   = ggml_new_tensor_2d(cw, GGML_TYPE_Q8_0, n_embd, d*nkv);
    ggml_tensor * wv   = ggml_new_tensor_2d(cw, GGML_TYPE_Q8_0, n_embd, d*nkv);
    ggml_tensor * rot  = ggml_new_tensor_2d(cw, GGML_TYPE_F32, d, d);
    ggml_tensor * pos  = ggml_new_tensor_1d(cw, GGML_TYPE_I32, 1);
    ggml_tensor * kidx = ggml_new_tensor_1d(cw, GGML_TYPE_I64, 1);
    ggml_tensor * vidx = ggml_new_tensor_1d(cw, GGML_TYPE_I64, 1);
    ggml_tensor * kc   = ggml_new_tensor_2d(cw, GGML_TYPE_TURBO4_0, d*nkv, n_cells);
    ggml_tensor * vc   = ggml_new_tensor_2d(cw, GGML_TYPE_TURBO4_0, d*nkv, n_cells);

    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_tensor * q = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, wq, x), d, nh, 1);
    q = ggml_rope_ext(ctx, q, pos, nullptr, d, GGML_ROPE_TYPE_NEOX, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    q = hadamard(ctx, q, rot);
    ggml_set_output(q->view_src);  // the transform's own output (q: a reshape of it) stays for reading
    ggml_tensor * v = hadamard(ctx, ggml_reshape_3d(ctx, ggml_mul_mat(ctx, wv, x), d, nkv, 1), rot);
    if (f16_v) {
        v = ggml_cast(ctx, v, GGML_TYPE_F16);
    }
    ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, wk, x), d, nkv, 1);
    k = ggml_rope_ext(ctx, k, pos, nullptr, d, GGML_ROPE_TYPE_NEOX, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    k = hadamard(ctx, k, rot);
    ggml_build_forward_expand(gf, q);
    ggml_build_forward_expand(gf, v);
    ggml_build_forward_expand(gf, k);
    ggml_tensor * kw = ggml_set_rows(ctx, kc, ggml_view_2d(ctx, k, d*nkv, 1, ggml_row_size(k->type, d*nkv), 0), kidx);
    ggml_tensor * vw = ggml_set_rows(ctx, vc, ggml_view_2d(ctx, v, d*nkv, 1, ggml_row_size(v->type, d*nkv), 0), vidx);
    ggml_build_forward_expand(gf, kw);
    ggml_build_forward_expand(gf, vw);

    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(cw, be);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
    if (!ggml_gallocr_alloc_graph(ga, gf)) {
        fprintf(stderr, "graph allocation failed\n");
        return 1;
    }

    // the pairs the loop leaves its barrier out between, as ggml_graph_compute_thread walks the graph
    {
        const ggml_tensor * chain[GGML_TURBO_BARRIER_CHAIN];
        int n_chain = 0;
        for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
            ggml_tensor * node = ggml_graph_node(gf, i);
            if (ggml_op_is_empty(node->op)) {
                continue;
            }
            if (n_chain >= GGML_TURBO_BARRIER_CHAIN) {
                n_chain = 0;
                continue;
            }
            chain[n_chain++] = node;
            int next = i + 1;
            while (next < ggml_graph_n_nodes(gf) && ggml_op_is_empty(ggml_graph_node(gf, next)->op)) {
                next++;
            }
            if (next < ggml_graph_n_nodes(gf) && ggml_turbo_barrier_skip(chain, n_chain, ggml_graph_node(gf, next), nth)) {
                printf("skip %s->%s\n", ggml_op_desc(node), ggml_op_desc(ggml_graph_node(gf, next)));
            } else {
                n_chain = 0;
            }
        }
    }

    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](ggml_tensor * t, float scale) {
        std::vector<float> h(ggml_nelements(t));
        for (float & f : h) f = scale*nd(rng);
        if (t->type == GGML_TYPE_F32) {
            ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
        } else {
            std::vector<uint8_t> qd(ggml_nbytes(t));
            ggml_quantize_chunk(t->type, h.data(), qd.data(), 0, t->ne[1], t->ne[0], nullptr);
            ggml_backend_tensor_set(t, qd.data(), 0, qd.size());
        }
    };
    fill(wq, 0.1f); fill(wk, 0.1f); fill(wv, 0.1f); fill(rot, 1.0f);  // the CPU's transform does not read rot's values
    std::vector<uint8_t> cache0(ggml_nbytes(kc));
    for (auto & b : cache0) b = (uint8_t) rng();

    std::vector<uint8_t> ref[3], got[3];
    for (int it = 0; it < iters; ++it) {
        fill(x, 1.0f);
        const int32_t p = (int32_t) (rng() % 4000);
        const int64_t ik = (int64_t) (rng() % n_cells), iv = (int64_t) (rng() % n_cells);
        ggml_backend_tensor_set(pos, &p, 0, sizeof(p));
        ggml_backend_tensor_set(kidx, &ik, 0, sizeof(ik));
        ggml_backend_tensor_set(vidx, &iv, 0, sizeof(iv));
        for (int pass = 0; pass < 2; ++pass) {
            ggml_backend_tensor_set(kc, cache0.data(), 0, cache0.size());
            ggml_backend_tensor_set(vc, cache0.data(), 0, cache0.size());
            ggml_backend_cpu_set_n_threads(be, pass == 0 ? 1 : nth);
            if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
                fprintf(stderr, "compute failed\n");
                return 1;
            }
            std::vector<uint8_t> * out = pass == 0 ? ref : got;
            const ggml_tensor * ts[3] = { q, kc, vc };
            for (int j = 0; j < 3; ++j) {
                out[j].resize(ggml_nbytes(ts[j]));
                ggml_backend_tensor_get(ts[j], out[j].data(), 0, out[j].size());
            }
        }
        for (int j = 0; j < 3; ++j) {
            if (ref[j] != got[j]) {
                size_t b = 0;
                while (ref[j][b] == got[j][b]) ++b;
                printf("iteration %d: %s differs at byte %zu (%d threads against one)\n", it, j == 0 ? "Q" : j == 1 ? "K cache" : "V cache", b, nth);
                return 1;
            }
        }
    }
    printf("OK %d\n", iters);
    ggml_gallocr_free(ga);
    ggml_backend_buffer_free(wbuf);
    ggml_backend_free(be);
    ggml_free(ctx);
    ggml_free(cw);
    return 0;
}
