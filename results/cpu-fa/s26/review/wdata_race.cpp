// Reproducer: pair 3 (SET_ROWS -> SET_ROWS) admits a SET_ROWS that uses the shared work buffer wdata
// (F16 source into a non-F16 destination: ops.cpp ggml_compute_forward_set_rows_impl, wdata slice
// (nc + CACHE_LINE_SIZE_F32)*ith). Thread 0 in the second node then overwrites the per-thread scratch another
// thread is still using in an earlier node of the chain (another F16 SET_ROWS with a shorter row, or a ROPE's
// sin/cos cache).
//
//   wdata_race MODE N_THREADS ITERS
//     MODE 0: SET_ROWS(F16 [64, R1] -> turbo4) -> SET_ROWS(F16 [N2, R2] -> turbo4)
//     MODE 1: ROPE -> Hadamard MUL_MAT -> SET_ROWS(turbo4, one row, block split) -> SET_ROWS(F16 [N2, R2] -> turbo4)
//     MODE 2: as 0 but destinations F32 (non-turbo, so n_tasks = 1 in the plan)
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

static ggml_tensor * hadamard(ggml_context * ctx, ggml_tensor * cur, ggml_tensor * rot) {
    ggml_tensor * r = ggml_reshape_2d(ctx, cur, rot->ne[0], ggml_nelements(cur) / rot->ne[0]);
    r = ggml_mul_mat(ctx, rot, r);
    ggml_mul_mat_set_hint(r, GGML_HINT_SRC0_IS_HADAMARD);
    return ggml_reshape_3d(ctx, r, cur->ne[0], cur->ne[1], cur->ne[2]);
}

int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s MODE N_THREADS ITERS [CONTROL]\n", argv[0]); return 2; }
    const bool control = argc > 4 && atoi(argv[4]);
    const int mode = atoi(argv[1]), nth = atoi(argv[2]), iters = atoi(argv[3]);

    ggml_init_params ip = { 64*ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
    ggml_context * cw  = ggml_init(ip);
    ggml_context * ctx = ggml_init(ip);
    ggml_cgraph * gf = ggml_new_graph(ctx);

    const ggml_type dt = mode == 2 ? GGML_TYPE_F32 : GGML_TYPE_TURBO4_0;
    const int R1 = 64, M1 = 64, N2 = 4096, R2 = 16, M2 = 16;
    const int d = 64, nkv = 64;  // mode 1: 64 heads of 64

    std::vector<ggml_tensor *> inputs_f16, inputs_f32, outputs;
    ggml_tensor * idx1 = nullptr, * idx2 = nullptr, * pos = nullptr, * rot = nullptr;

    ggml_tensor * x2   = ggml_new_tensor_2d(cw, GGML_TYPE_F16, N2, R2);
    idx2               = ggml_new_tensor_1d(cw, GGML_TYPE_I64, R2);
    ggml_tensor * dst2 = ggml_new_tensor_2d(cw, dt, N2, M2);
    inputs_f16.push_back(x2);
    outputs.push_back(dst2);

    ggml_tensor * first_out = nullptr;
    if (mode == 0 || mode == 2) {
        ggml_tensor * x1   = ggml_new_tensor_2d(cw, GGML_TYPE_F16, 64, R1);
        idx1               = ggml_new_tensor_1d(cw, GGML_TYPE_I64, R1);
        ggml_tensor * dst1 = ggml_new_tensor_2d(cw, dt, 64, M1);
        inputs_f16.push_back(x1);
        outputs.push_back(dst1);
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, dst1, x1, idx1));
    } else {
        ggml_tensor * x  = ggml_new_tensor_3d(cw, GGML_TYPE_F32, d, nkv, 1);
        pos              = ggml_new_tensor_1d(cw, GGML_TYPE_I32, 1);
        rot              = ggml_new_tensor_2d(cw, GGML_TYPE_F32, d, d);
        idx1             = ggml_new_tensor_1d(cw, GGML_TYPE_I64, 1);
        ggml_tensor * kc = ggml_new_tensor_2d(cw, GGML_TYPE_TURBO4_0, d*nkv, 4);
        inputs_f32.push_back(x);
        outputs.push_back(kc);
        ggml_tensor * k = ggml_rope_ext(ctx, x, pos, nullptr, d, GGML_ROPE_TYPE_NEOX, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        k = hadamard(ctx, k, rot);
        ggml_build_forward_expand(gf, k);
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, kc, ggml_view_2d(ctx, k, d*nkv, 1, ggml_row_size(k->type, d*nkv), 0), idx1));
    }
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, dst2, x2, idx2));

    ggml_backend_t be = ggml_backend_cpu_init();
    if (control) ggml_backend_cpu_set_abort_callback(be, [](void *) { return false; }, nullptr);  // control: an abort callback turns patch 0015 off
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(cw, be);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
    if (!ggml_gallocr_alloc_graph(ga, gf)) { fprintf(stderr, "alloc failed\n"); return 1; }

    {   // which barriers the rule leaves out (same walk as ggml_graph_compute_thread)
        const ggml_tensor * chain[GGML_TURBO_BARRIER_CHAIN];
        int n_chain = 0;
        for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
            ggml_tensor * node = ggml_graph_node(gf, i);
            if (ggml_op_is_empty(node->op)) continue;
            if (n_chain >= GGML_TURBO_BARRIER_CHAIN) { n_chain = 0; continue; }
            chain[n_chain++] = node;
            int next = i + 1;
            while (next < ggml_graph_n_nodes(gf) && ggml_op_is_empty(ggml_graph_node(gf, next)->op)) next++;
            if (next < ggml_graph_n_nodes(gf) && ggml_turbo_barrier_skip(chain, n_chain, ggml_graph_node(gf, next), nth)) {
                printf("skip %s(%s)->%s(%s)\n", ggml_op_desc(node), ggml_type_name(node->type),
                       ggml_op_desc(ggml_graph_node(gf, next)), ggml_type_name(ggml_graph_node(gf, next)->type));
            } else {
                n_chain = 0;
            }
        }
    }

    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int bad = 0;
    for (int it = 0; it < iters; ++it) {
        for (ggml_tensor * t : inputs_f16) {
            std::vector<ggml_fp16_t> h(ggml_nelements(t));
            for (auto & v : h) v = ggml_fp32_to_fp16(nd(rng));
            ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
        }
        for (ggml_tensor * t : inputs_f32) {
            std::vector<float> h(ggml_nelements(t));
            for (auto & v : h) v = nd(rng);
            ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
        }
        if (rot) { std::vector<float> h(ggml_nelements(rot), 1.0f); ggml_backend_tensor_set(rot, h.data(), 0, ggml_nbytes(rot)); }
        if (pos) { int32_t p = 100 + (int32_t)(rng() % 3000); ggml_backend_tensor_set(pos, &p, 0, sizeof(p)); }
        {
            std::vector<int64_t> h(idx1->ne[0]);
            for (size_t i = 0; i < h.size(); ++i) h[i] = (int64_t) i;
            ggml_backend_tensor_set(idx1, h.data(), 0, ggml_nbytes(idx1));
            std::vector<int64_t> h2(R2);
            for (int i = 0; i < R2; ++i) h2[i] = i;
            ggml_backend_tensor_set(idx2, h2.data(), 0, ggml_nbytes(idx2));
        }
        std::vector<std::vector<uint8_t>> ref(outputs.size()), got(outputs.size());
        for (int pass = 0; pass < 2; ++pass) {
            for (ggml_tensor * t : outputs) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
            ggml_backend_cpu_set_n_threads(be, pass == 0 ? 1 : nth);
            if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute failed\n"); return 1; }
            auto & out = pass == 0 ? ref : got;
            for (size_t j = 0; j < outputs.size(); ++j) {
                out[j].resize(ggml_nbytes(outputs[j]));
                ggml_backend_tensor_get(outputs[j], out[j].data(), 0, out[j].size());
            }
        }
        for (size_t j = 0; j < outputs.size(); ++j) {
            if (ref[j] != got[j]) {
                size_t b = 0;
                while (ref[j][b] == got[j][b]) ++b;
                if (bad < 5) printf("iteration %d: output %zu (%s) differs at byte %zu of %zu (%d threads vs 1)\n", it, j,
                                    ggml_type_name(outputs[j]->type), b, ref[j].size(), nth);
                ++bad;
            }
        }
    }
    printf("%d/%d iterations differ\n", bad, iters);
    return bad ? 1 : 0;
}
