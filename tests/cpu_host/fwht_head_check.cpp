// tqgguf: ggml_turbo_fwht_head (native/ggml/src/ggml-cpu/ggml-turbo-fwht.h, patch 0016) alone, for the instruction
// set this file is compiled for (-mavx2 -mno-avx512f: the AVX2 branch; -mavx512f: the AVX-512 one), then the stages
// it leaves as ggml_compute_forward_fwht_impl runs them, against the transform written out (scale, then the stages
// len = 1 .. n/2 of u + v, u - v) on rows of values from 2^-20 to 2^19. Compile with -ffp-contract=off.
//
//   fwht_head_check      prints "OK <rows> L=<first stage left to the loop>" or the first difference and exits 1
#include "ggml-turbo-fwht.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

static void stages(float * v, int n, int len0) {
    for (int len = len0; len < n; len <<= 1) {
        for (int i = 0; i < n; i += 2*len) {
            for (int j = i; j < i + len; ++j) {
                const float u = v[j], w = v[j + len];
                v[j]       = u + w;
                v[j + len] = u - w;
            }
        }
    }
}

int main() {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int rows = 0;
    int64_t len_seen = 0;
    for (int n = 2; n <= 1024; n *= 2) {
        for (int rep = 0; rep < 20; ++rep, ++rows) {
            std::vector<float> x(n), ref(n), got(n);
            for (float & f : x) f = nd(rng) * std::ldexp(1.0f, (int) (rng() % 40) - 20);
            const float scale = 1.0f / sqrtf((float) n);
            for (int j = 0; j < n; ++j) ref[j] = x[j] * scale;
            stages(ref.data(), n, 1);
            const int64_t len0 = ggml_turbo_fwht_head(x.data(), got.data(), n, scale);
            if (len0 == 1) {
                for (int j = 0; j < n; ++j) got[j] = x[j] * scale;
            }
            len_seen = len0 > len_seen ? len0 : len_seen;
            stages(got.data(), n, (int) len0);
            for (int j = 0; j < n; ++j) {
                if (memcmp(&ref[j], &got[j], sizeof(float)) != 0) {
                    printf("n %d value %d: %.9g, the loop gives %.9g (head to len %lld)\n", n, j, got[j], ref[j], (long long) len0);
                    return 1;
                }
            }
        }
    }
    printf("OK %d L=%lld\n", rows, (long long) len_seen);
    return 0;
}
