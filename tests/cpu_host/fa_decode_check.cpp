// tqgguf: one FLASH_ATTN_EXT decode (NQ queries, default one) on ggml's CPU backend, the engine's own library,
// so the decode of native/ggml/src/ggml-cpu/ggml-turbo-fa.h runs in whichever GGML_TURBO_FA_GROUPED mode the
// environment sets. Q, K and V are Gaussian (seeded), K and V written to the cache types by ggml_cpy; query
// i of NQ sees the first N_VALID - (NQ - 1 - i) cells (causal: the last one N_VALID), the others masked (-inf).
// Writes the output floats (F32, [D, heads, NQ]) to OUT and prints the NMSE against attention in double
// precision over the values the cache holds; with NQ > 1 first "alone_differ N": how many of the batch's
// output floats differ in any bit from the same query decoded alone (a one-query call with its mask row).
//
//   fa_decode_check OUT TYPE_K TYPE_V D N_HEAD_KV G N_KV N_VALID [NQ]   (types as ggml_type numbers)
//
// For speed runs (docs/CPU.md, session 28): FA_CHECK_INTERLEAVE=1 gives query i only the cells c with c % NQ == i
// (NQ sequences' tokens in one unified cache); FA_CHECK_REPS=N also prints "us_per_call X", the batched call's
// mean over N more runs on two threads. FA_CHECK_SINKS=1 adds an attention sink per head (a logit with no value,
// gpt-oss style: ggml_flash_attn_ext_add_sinks), Gaussian, in the reference too.
#include "ggml.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: %s OUT TYPE_K TYPE_V D N_HEAD_KV G N_KV N_VALID [NQ]\n", argv[0]);
        return 2;
    }
    const ggml_type tk = (ggml_type) atoi(argv[2]), tv = (ggml_type) atoi(argv[3]);
    const int D = atoi(argv[4]), hkv = atoi(argv[5]), G = atoi(argv[6]), nkv = atoi(argv[7]), nvalid = atoi(argv[8]);
    const int NQ = argc == 10 ? atoi(argv[9]) : 1;
    if (NQ < 1 || nvalid - (NQ - 1) < 1 || nvalid > nkv) {
        fprintf(stderr, "need 1 <= NQ <= N_VALID <= N_KV\n");
        return 2;
    }
    const int H = hkv*G;
    auto visible = [&](int qi) { return nvalid - (NQ - 1 - qi); };
    const bool interleave = getenv("FA_CHECK_INTERLEAVE") != nullptr && atoi(getenv("FA_CHECK_INTERLEAVE")) != 0;
    const int  reps       = getenv("FA_CHECK_REPS") != nullptr ? atoi(getenv("FA_CHECK_REPS")) : 0;
    auto seen = [&](int qi, int c) { return c < visible(qi) && (!interleave || c % NQ == qi); };
    const bool with_sinks = getenv("FA_CHECK_SINKS") != nullptr && atoi(getenv("FA_CHECK_SINKS")) != 0;
    const float scale = 1.0f/sqrtf((float) D);
    ggml_init_params ip = { (size_t) 64*D*nkv*hkv*8 + (size_t) 16*(D*H + nkv)*NQ + (64u << 20), nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * q  = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, NQ, H, 1);
    ggml_tensor * kf = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, nkv, hkv, 1);
    ggml_tensor * vf = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, nkv, hkv, 1);
    ggml_tensor * k  = ggml_new_tensor_4d(ctx, tk, D, nkv, hkv, 1);
    ggml_tensor * v  = ggml_new_tensor_4d(ctx, tv, D, nkv, hkv, 1);
    ggml_tensor * m  = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, nkv, NQ, 1, 1);
    ggml_tensor * sinks = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, H);
    std::mt19937 rng(20);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int h = 0; h < H; ++h) {
        ((float *) sinks->data)[h] = 2.0f*nd(rng);
    }
    for (int i = 0; i < D*H*NQ; ++i) {
        ((float *) q->data)[i] = 2.0f*nd(rng);  // sharper than N(0, 1): a softmax that is not flat
    }
    for (int i = 0; i < D*nkv*hkv; ++i) {
        ((float *) kf->data)[i] = nd(rng);
        ((float *) vf->data)[i] = nd(rng);
    }
    for (int qi = 0; qi < NQ; ++qi) {
        for (int i = 0; i < nkv; ++i) {
            ((ggml_fp16_t *) m->data)[qi*nkv + i] = ggml_fp32_to_fp16(seen(qi, i) ? 0.0f : -INFINITY);
        }
    }
    ggml_cgraph * g0 = ggml_new_graph(ctx);
    ggml_build_forward_expand(g0, ggml_cpy(ctx, kf, k));
    ggml_build_forward_expand(g0, ggml_cpy(ctx, vf, v));
    ggml_graph_compute_with_ctx(ctx, g0, 2);
    ggml_tensor * fa = ggml_flash_attn_ext(ctx, q, k, v, m, scale, 0.0f, 0.0f);
    if (with_sinks) {
        ggml_flash_attn_ext_add_sinks(fa, sinks);
    }
    ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, fa);
    ggml_graph_compute_with_ctx(ctx, g, 2);  // two threads (one query from 512 cells: two KV chunks, their partials merged)
    if (reps > 0) {
        const int64_t t0 = ggml_time_us();
        for (int i = 0; i < reps; ++i) {
            ggml_graph_compute_with_ctx(ctx, g, 2);
        }
        printf("us_per_call %.2f\n", (double) (ggml_time_us() - t0) / reps);
    }
    if (NQ > 1) {  // each query alone: the same K/V, its Q rows and its mask row
        long differ = 0;
        for (int qi = 0; qi < NQ; ++qi) {
            ggml_tensor * q1 = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, 1, H, 1);
            ggml_tensor * m1 = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, nkv, 1, 1, 1);
            for (int h = 0; h < H; ++h) {
                memcpy((float *) q1->data + h*D, (const float *) q->data + ((size_t) h*NQ + qi)*D, D*sizeof(float));
            }
            memcpy(m1->data, (const ggml_fp16_t *) m->data + (size_t) qi*nkv, nkv*sizeof(ggml_fp16_t));
            ggml_tensor * fa1 = ggml_flash_attn_ext(ctx, q1, k, v, m1, scale, 0.0f, 0.0f);
            if (with_sinks) {
                ggml_flash_attn_ext_add_sinks(fa1, sinks);
            }
            ggml_cgraph * g1 = ggml_new_graph(ctx);
            ggml_build_forward_expand(g1, fa1);
            ggml_graph_compute_with_ctx(ctx, g1, 2);
            const uint32_t * a = (const uint32_t *) fa1->data;
            const uint32_t * b = (const uint32_t *) fa->data + (size_t) qi*H*D;
            for (int i = 0; i < H*D; ++i) {
                differ += a[i] != b[i];
            }
        }
        printf("alone_differ %ld\n", differ);
    }
    FILE * f = fopen(argv[1], "wb");
    if (!f || fwrite(fa->data, 1, ggml_nbytes(fa), f) != ggml_nbytes(fa)) {
        fprintf(stderr, "cannot write %s\n", argv[1]);
        return 1;
    }
    fclose(f);

    std::vector<float> kd((size_t) D*nkv*hkv), vd((size_t) D*nkv*hkv);
    auto decode = [&](const ggml_tensor * t, std::vector<float> & o) {
        for (int r = 0; r < nkv*hkv; ++r) {
            const char * row = (const char *) t->data + (size_t) r*t->nb[1];
            if (t->type == GGML_TYPE_F16) {
                for (int i = 0; i < D; ++i) {
                    o[(size_t) r*D + i] = ggml_fp16_to_fp32(((const ggml_fp16_t *) row)[i]);
                }
            } else if (t->type == GGML_TYPE_F32) {
                for (int i = 0; i < D; ++i) {
                    o[(size_t) r*D + i] = ((const float *) row)[i];
                }
            } else {
                ggml_get_type_traits(t->type)->to_float(row, o.data() + (size_t) r*D, D);
            }
        }
    };
    decode(k, kd);
    decode(v, vd);
    double err = 0.0, nrm = 0.0;
    for (int qi = 0; qi < NQ; ++qi)
    for (int h = 0; h < H; ++h) {
        const int kh = h / G, nvis = visible(qi);
        std::vector<double> s(nvis), o(D, 0.0);
        double mx = -INFINITY, S = 0.0;
        for (int c = 0; c < nvis; ++c) {
            if (!seen(qi, c)) {
                s[c] = -INFINITY;
                continue;
            }
            double d = 0.0;
            for (int i = 0; i < D; ++i) {
                d += (double) ((const float *) q->data)[((size_t) h*NQ + qi)*D + i]*kd[((size_t) kh*nkv + c)*D + i];
            }
            s[c] = d*scale;
            mx = std::max(mx, s[c]);
        }
        if (with_sinks) {  // the sink joins the softmax's sum, with no value
            const double sk = ((const float *) sinks->data)[h];
            mx = std::max(mx, sk);
            S += exp(sk - mx);
        }
        for (int c = 0; c < nvis; ++c) {
            const double w = exp(s[c] - mx);  // 0 for a cell the query does not see
            S += w;
            for (int i = 0; i < D; ++i) {
                o[i] += w*vd[((size_t) kh*nkv + c)*D + i];
            }
        }
        for (int i = 0; i < D; ++i) {
            const double ref = o[i]/S, got = ((const float *) fa->data)[((size_t) qi*H + h)*D + i];
            err += (got - ref)*(got - ref);
            nrm += ref*ref;
        }
    }
    printf("NMSE %.6e\n", err/nrm);
    ggml_free(ctx);
    return 0;
}
