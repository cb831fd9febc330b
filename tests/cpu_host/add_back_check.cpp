// tqgguf: K centering `full`'s add-back in one CPU op (native/src/llama-kv-center.cpp, llama_k_center_add_back)
// against the six graph nodes it replaces (two broadcast multiplies, an add, the Hadamard product as upstream
// builds it, the cast of the K view to F32 and the add), both in one graph on the engine's own libraries. K is
// a cache-like view (a cell's heads side by side) of random values quantized to TYPE; R(pos)·uA / R(pos)·uB are
// cos and sin of random angles; bA / bB are Gaussian at Qwen2.5's bias size (tens to hundreds).
//
//   add_back_check TYPE D N_HEAD_KV N_KV N_ROT N_THREADS     (TYPE: a ggml type id; N_ROT 0: no rotation)
//
// Prints the number of values whose bits differ between the two and the largest |value|; exits 1 on a
// shape or compute failure.
#include "ggml.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

ggml_tensor * llama_k_center_add_back(ggml_context * ctx, ggml_tensor * k, ggml_tensor * ropeA, ggml_tensor * ropeB,
                                      ggml_tensor * bA, ggml_tensor * bB, ggml_tensor * rot);

int main(int argc, char ** argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s TYPE D N_HEAD_KV N_KV N_ROT N_THREADS\n", argv[0]);
        return 2;
    }
    const ggml_type type = (ggml_type) atoi(argv[1]);
    const int D = atoi(argv[2]), nh = atoi(argv[3]), nkv = atoi(argv[4]), nrot = atoi(argv[5]), nth = atoi(argv[6]);
    ggml_init_params ip = { (size_t) 4*(12*(size_t) D*nh*nkv + 4*D*nh + nrot*nrot) + (32u << 20), nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    // the cache: [D*nh (a cell's heads), nkv] of TYPE, K the [D, nh, nkv] view the graph reads
    ggml_tensor * cache = ggml_new_tensor_2d(ctx, type, (int64_t) D*nh, nkv);
    ggml_tensor * ra = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, nh, nkv);
    ggml_tensor * rb = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, nh, nkv);
    ggml_tensor * bp = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, nh, 2);
    ggml_tensor * rot = nrot ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nrot, nrot) : nullptr;
    std::mt19937 rng(22);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ang(0.0f, 6.2831853f);
    std::vector<float> x((size_t) D*nh*nkv);
    for (float & v : x) {
        v = 8.0f*nd(rng);
    }
    ggml_quantize_chunk(type, x.data(), cache->data, 0, nkv, (int64_t) D*nh, nullptr);
    for (int64_t i = 0; i < (int64_t) D*nh*nkv; i += 2) {  // (cos, sin) pairs, as RoPE makes them
        const float a = ang(rng);
        ((float *) ra->data)[i] = cosf(a);  ((float *) ra->data)[i + 1] = sinf(a);
        ((float *) rb->data)[i] = -sinf(a); ((float *) rb->data)[i + 1] = cosf(a);
    }
    for (int64_t i = 0; i < ggml_nelements(bp); ++i) {
        ((float *) bp->data)[i] = 60.0f*nd(rng);
    }
    if (rot) {  // H_n / sqrt(n); only its size matters to either side (upstream's FWHT for the hint)
        for (int i = 0; i < nrot; ++i) {
            for (int j = 0; j < nrot; ++j) {
                ((float *) rot->data)[i*nrot + j] = (__builtin_popcount(i & j) % 2 ? -1.0f : 1.0f)/sqrtf((float) nrot);
            }
        }
    }
    ggml_tensor * k  = ggml_view_3d(ctx, cache, D, nh, nkv, ggml_row_size(type, D), cache->nb[1], 0);
    ggml_tensor * bA = ggml_view_2d(ctx, bp, D, nh, bp->nb[1], 0);
    ggml_tensor * bB = ggml_view_2d(ctx, bp, D, nh, bp->nb[1], bp->nb[2]);
    // the six nodes, as patch 0006 builds them
    ggml_tensor * bias = ggml_add(ctx, ggml_mul(ctx, ra, ggml_view_3d(ctx, bp, D, nh, 1, bp->nb[1], bp->nb[2], 0)),
                                       ggml_mul(ctx, rb, ggml_view_3d(ctx, bp, D, nh, 1, bp->nb[1], bp->nb[2], bp->nb[2])));
    if (rot) {
        ggml_tensor * r = ggml_mul_mat(ctx, rot, ggml_reshape_2d(ctx, bias, nrot, ggml_nelements(bias)/nrot));
        ggml_mul_mat_set_hint(r, GGML_HINT_SRC0_IS_HADAMARD);
        bias = ggml_reshape_3d(ctx, r, D, nh, nkv);
    }
    ggml_tensor * ref = ggml_add(ctx, ggml_cast(ctx, k, GGML_TYPE_F32), bias);
    ggml_tensor * got = llama_k_center_add_back(ctx, k, ra, rb, bA, bB, rot);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, ref);
    ggml_build_forward_expand(gf, got);
    if (ggml_graph_compute_with_ctx(ctx, gf, nth) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        return 1;
    }
    if (got->type != GGML_TYPE_F32 || got->ne[0] != D || got->ne[1] != nh || got->ne[2] != nkv || !ggml_is_contiguous(got)) {
        fprintf(stderr, "result shape [%lld, %lld, %lld]\n", (long long) got->ne[0], (long long) got->ne[1], (long long) got->ne[2]);
        return 1;
    }
    long long n_diff = 0;
    double amax = 0.0;
    const float * g = (const float *) got->data;
    const float * r = (const float *) ref->data;
    for (int64_t i = 0; i < ggml_nelements(got); ++i) {
        n_diff += memcmp(g + i, r + i, sizeof(float)) != 0;
        amax = std::fmax(amax, std::fabs(r[i]));
    }
    printf("%lld %.3f\n", n_diff, amax);
    ggml_free(ctx);
    return 0;
}
