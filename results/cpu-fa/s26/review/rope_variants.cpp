// ROPE variants -> Hadamard (pair 1), N threads vs 1, memory laid out by ggml-alloc; prints whether the rule skips.
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-turbo-barrier.h"
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

static int run(int d, int nh, int nt, int mode, int n_dims, bool inplace, bool ff, int nth, int iters) {
    ggml_init_params ip = { 64*ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
    ggml_context * cw = ggml_init(ip), * ctx = ggml_init(ip);
    const bool mrope = mode & GGML_ROPE_TYPE_MROPE;
    ggml_tensor * x   = ggml_new_tensor_3d(cw, GGML_TYPE_F32, d, nh, nt);
    ggml_tensor * pos = ggml_new_tensor_1d(cw, GGML_TYPE_I32, nt * (mrope ? 4 : 1));
    ggml_tensor * rot = ggml_new_tensor_2d(cw, GGML_TYPE_F32, d, d);
    ggml_tensor * fft = ff ? ggml_new_tensor_1d(cw, GGML_TYPE_F32, d/2) : nullptr;
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_tensor * X = ggml_reshape_3d(ctx, ggml_scale(ctx, ggml_reshape_2d(ctx, x, d*nh, nt), 1.0f), d, nh, nt);
    ggml_tensor * r;
    if (mrope) {
        int sections[4] = { n_dims/8, n_dims/8, n_dims/4 - 2*(n_dims/8), 0 };
        if (mode == GGML_ROPE_TYPE_VISION) { sections[0] = n_dims/4; sections[1] = n_dims/4; sections[2] = 0; }
        r = inplace ? ggml_rope_multi_inplace(ctx, X, pos, fft, n_dims, sections, mode, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f)
                    : ggml_rope_multi(ctx, X, pos, fft, n_dims, sections, mode, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    } else {
        r = inplace ? ggml_rope_ext_inplace(ctx, X, pos, fft, n_dims, mode, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f)
                    : ggml_rope_ext(ctx, X, pos, fft, n_dims, mode, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    }
    ggml_tensor * h = ggml_mul_mat(ctx, rot, ggml_reshape_2d(ctx, r, d, nh*nt));
    ggml_mul_mat_set_hint(h, GGML_HINT_SRC0_IS_HADAMARD);
    ggml_set_output(h);
    ggml_build_forward_expand(gf, h);
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(cw, be);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
    if (!ggml_gallocr_alloc_graph(ga, gf)) return 1;
    const ggml_tensor * chain[1] = { r };
    const bool skip = ggml_turbo_barrier_skip(chain, 1, h, nth);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int bad = 0;
    for (int it = 0; it < iters; ++it) {
        std::vector<float> hx(ggml_nelements(x)); for (auto & v : hx) v = nd(rng);
        ggml_backend_tensor_set(x, hx.data(), 0, ggml_nbytes(x));
        std::vector<int32_t> hp(ggml_nelements(pos)); for (auto & v : hp) v = rng() % 3000;
        ggml_backend_tensor_set(pos, hp.data(), 0, ggml_nbytes(pos));
        if (fft) { std::vector<float> hf(d/2); for (auto & v : hf) v = 1.0f + std::abs(nd(rng)); ggml_backend_tensor_set(fft, hf.data(), 0, ggml_nbytes(fft)); }
        std::vector<float> ref(ggml_nelements(h)), got(ggml_nelements(h));
        for (int pass = 0; pass < 2; ++pass) {
            ggml_backend_cpu_set_n_threads(be, pass ? nth : 1);
            ggml_backend_graph_compute(be, gf);
            ggml_backend_tensor_get(h, (pass ? got : ref).data(), 0, ggml_nbytes(h));
        }
        bad += ref != got;
    }
    printf("d %3d nh %2d nt %d mode %2d n_dims %3d inplace %d ff %d nth %d: skip %d, X==h %d, %d/%d differ\n",
           d, nh, nt, mode, n_dims, inplace, ff, nth, skip, X->data == h->data, bad, iters);
    ggml_gallocr_free(ga); ggml_backend_buffer_free(wbuf); ggml_backend_free(be); ggml_free(ctx); ggml_free(cw);
    return bad;
}

int main(int argc, char ** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 50;
    int bad = 0;
    const int modes[] = { GGML_ROPE_TYPE_NORMAL, GGML_ROPE_TYPE_NEOX, GGML_ROPE_TYPE_MROPE, GGML_ROPE_TYPE_IMROPE, GGML_ROPE_TYPE_VISION };
    for (int nth : { 2, 3, 5 })
    for (int mode : modes)
    for (int d : { 64, 128 })
    for (int nh : { 1, 7, 16, 256 })
    for (int nt : { 1, 3 })
    for (int partial : { 0, 1 })
    for (int inplace : { 0, 1 })
    for (int ff : { 0, 1 }) {
        int n_dims = mode == GGML_ROPE_TYPE_VISION ? d/2 : (partial ? d/2 : d);
        if (mode == GGML_ROPE_TYPE_VISION && partial) continue;
        bad += run(d, nh, nt, mode, n_dims, inplace, ff, nth, iters) != 0;
    }
    printf("configs with differences: %d\n", bad);
}
