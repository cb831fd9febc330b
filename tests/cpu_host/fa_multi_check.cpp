// tqgguf: the one-query decode's multi-head helpers (native/ggml/src/ggml-cpu/ggml-turbo-fa.h) against
// the ggml functions they stand for, bit for bit, on random rows: ggml_turbo_fa_dot_f16_multi against
// ggml_vec_dot_f16 per head (the engine's libggml-cpu), ggml_turbo_fa_mad_f32_multi against vec.h's
// ggml_vec_mad_f32 per head. Row lengths with and without vec.cpp's scalar leftovers (n not a multiple
// of the SIMD step), 1..8 heads, every head or some. Compiled with the engine's flags (-march=native)
// by tests/test_cpu_decode.py; prints one line per case and "all OK" or "FAILURES".
#include "ggml-turbo-fa.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

int main() {
    ggml_cpu_init();  // the F16 <-> F32 tables GGML_CPU_FP16_TO_FP32 reads on some targets
    std::mt19937 rng(27);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    bool ok = true;
    for (int n : { 64, 128, 256, 80, 40, 8 }) {
        for (int G : { 1, 3, 7, 8 }) {
            std::vector<ggml_fp16_t> k(n), qh((size_t) G*2*n);  // Q rows 2n halves apart (the decode's Qb layout)
            std::vector<float> qf((size_t) G*n);
            for (auto & x : k) x = GGML_CPU_FP32_TO_FP16(nd(rng));
            for (int j = 0; j < G; ++j) {
                for (int i = 0; i < n; ++i) {
                    qh[(size_t) j*2*n + i] = GGML_CPU_FP32_TO_FP16(nd(rng));
                    qf[(size_t) j*n + i]   = GGML_CPU_FP16_TO_FP32(qh[(size_t) j*2*n + i]);
                }
            }
            float s[GGML_TURBO_FA_DEC_MAX_G];
            ggml_turbo_fa_dot_f16_multi(n, G, s, k.data(), qh.data(), 2*n, qf.data(), n);
            int bad = 0;
            for (int j = 0; j < G; ++j) {
                float r;
                ggml_vec_dot_f16(n, &r, 0, k.data(), 0, qh.data() + (size_t) j*2*n, 0, 1);
                bad += bits(r) != bits(s[j]);
            }
            printf("%s dot_f16_multi n=%3d G=%d: %d of %d heads differ\n", bad ? "FAIL" : "OK  ", n, G, bad, G);
            ok &= bad == 0;

            std::vector<float> x(n), acc((size_t) G*n), ref;
            for (auto & v : x) v = nd(rng);
            for (auto & v : acc) v = nd(rng);
            ref = acc;
            int h[GGML_TURBO_FA_DEC_MAX_G];
            float w[GGML_TURBO_FA_DEC_MAX_G];
            int na = 0;
            for (int j = 0; j < G; ++j) {
                if (G > 1 && j % 3 == 1) continue;  // some heads masked out of this row
                h[na] = j;
                w[na] = 0.01f + std::abs(nd(rng));
                ++na;
            }
            ggml_turbo_fa_mad_f32_multi(n, acc.data(), n, x.data(), w, h, na);
            for (int a = 0; a < na; ++a) {
                ggml_vec_mad_f32(n, ref.data() + (size_t) h[a]*n, x.data(), w[a]);
            }
            bad = 0;
            for (size_t i = 0; i < acc.size(); ++i) {
                bad += bits(acc[i]) != bits(ref[i]);
            }
            printf("%s mad_f32_multi n=%3d G=%d (%d heads): %d of %zu values differ\n", bad ? "FAIL" : "OK  ", n, G, na, bad, acc.size());
            ok &= bad == 0;
        }
    }
    printf("%s\n", ok ? "all OK" : "FAILURES");
    return ok ? 0 : 1;
}
