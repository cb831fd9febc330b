// Reproducer: pair 1's in-place exception in ggml_turbo_barrier_skip keys on pointer equality
// (m->src[i] == a->src[0]) for every source slot i, so a ROPE whose freq_factors (src[2]) is the same tensor as its
// input (src[0]) lets the Hadamard write over the freq factors while other threads may still read them.
//   ff_alias N_THREADS ITERS [CONTROL]
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-turbo-barrier.h"
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char ** argv) {
    const int nth = atoi(argv[1]), iters = atoi(argv[2]);
    const bool control = argc > 3 && atoi(argv[3]);
    const int d = 64, nh = 256;
    ggml_init_params ip = { 64*ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
    ggml_context * cw = ggml_init(ip), * ctx = ggml_init(ip);
    ggml_tensor * x   = ggml_new_tensor_3d(cw, GGML_TYPE_F32, d, nh, 1);
    ggml_tensor * pos = ggml_new_tensor_1d(cw, GGML_TYPE_I32, 1);
    ggml_tensor * rot = ggml_new_tensor_2d(cw, GGML_TYPE_F32, d, d);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_tensor * X = ggml_scale(ctx, x, 1.0f);                       // an intermediate the allocator can free
    ggml_tensor * r = ggml_rope_ext(ctx, X, pos, X /*freq_factors*/, d, GGML_ROPE_TYPE_NEOX, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ggml_tensor * h = ggml_mul_mat(ctx, rot, ggml_reshape_2d(ctx, r, d, nh));
    ggml_mul_mat_set_hint(h, GGML_HINT_SRC0_IS_HADAMARD);
    ggml_set_output(h);
    ggml_build_forward_expand(gf, h);
    ggml_backend_t be = ggml_backend_cpu_init();
    if (control) ggml_backend_cpu_set_abort_callback(be, [](void *) { return false; }, nullptr);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(cw, be);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
    if (!ggml_gallocr_alloc_graph(ga, gf)) return 1;
    printf("X %p  rope %p  hadamard %p\n", X->data, r->data, h->data);
    const ggml_tensor * chain[1] = { r };
    printf("rule leaves the ROPE->MUL_MAT barrier out: %d\n", (int) ggml_turbo_barrier_skip(chain, 1, h, nth));
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int bad = 0;
    for (int it = 0; it < iters; ++it) {
        std::vector<float> hx(ggml_nelements(x));
        for (auto & v : hx) v = 0.5f + std::abs(nd(rng));
        ggml_backend_tensor_set(x, hx.data(), 0, ggml_nbytes(x));
        int32_t p = 100 + rng() % 3000; ggml_backend_tensor_set(pos, &p, 0, 4);
        std::vector<float> ref(ggml_nelements(h)), got(ggml_nelements(h));
        for (int pass = 0; pass < 2; ++pass) {
            ggml_backend_cpu_set_n_threads(be, pass ? nth : 1);
            ggml_backend_graph_compute(be, gf);
            ggml_backend_tensor_get(h, (pass ? got : ref).data(), 0, ggml_nbytes(h));
        }
        if (ref != got) { if (!bad) { size_t i = 0; while (ref[i] == got[i]) ++i; printf("iteration %d: differs at float %zu (row %zu)\n", it, i, i / d); } ++bad; }
    }
    printf("%d/%d iterations differ (%d threads vs 1%s)\n", bad, iters, nth, control ? ", control: abort callback set" : "");
    return 0;
}
