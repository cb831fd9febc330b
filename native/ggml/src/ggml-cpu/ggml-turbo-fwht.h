// tqgguf: the first butterfly stages of ggml-cpu's fast Walsh-Hadamard transform (ggml_compute_forward_fwht,
// the Hadamard rotation of Q, K, V and the attention output for a rotated KV cache) inside one SIMD register
// (patch 0016).
//
// Why: upstream runs the stages whose pairs lie less than a vector apart (len = 1 .. GGML_F32_EPR/2: 4 of a 64-row's
// 6 stages with AVX-512, 3 with AVX2) one float at a time, two loads and two stores per butterfly; on a decode
// step they are most of the transform's time (docs/CPU.md, session 26). Here a vector of GGML_F32_EPR values is
// loaded once, scaled, taken through those stages with lane permutes, and stored once.
//
// The same floats: stage len replaces x[j] and x[j + len] (j & len == 0) by u + v and u - v, u = x[j],
// v = x[j + len]. In a register, lane j holds a = x[j] and its partner's value b = x[j ^ len] after the permute;
// lanes with j & len == 0 take a + b = u + v, the others b - a = u - v: the same two IEEE operations on the same
// operands (addition commutes), so every value equals the one-at-a-time loop's, and the load's scaling is the
// loop's product.
//
// Included from ops.cpp only (C++; header-only so that ggml-cpu's source list is unchanged).
#pragma once

#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// dst[j] = src[j] * scale, then the stages len = 1, 2, .., L/2 of a row of n floats (L the vector width: 16 with
// AVX-512, 8 with AVX2), when n is a multiple of L. Returns the first stage left to do: L, or 1 when nothing was
// done (no such SIMD, or n not a multiple of L: the caller then scales and runs every stage itself).
static inline int64_t ggml_turbo_fwht_head(const float * src, float * dst, const int64_t n, const float scale) {
#if defined(__AVX512F__)
    if (n % 16 != 0) {
        return 1;
    }
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(src + i), vs);
        __m512 b = _mm512_permute_ps(a, 0xB1);                       // len 1: lanes j ^ 1
        a = _mm512_mask_blend_ps(0xAAAA, _mm512_add_ps(a, b), _mm512_sub_ps(b, a));
        b = _mm512_permute_ps(a, 0x4E);                              // len 2: j ^ 2
        a = _mm512_mask_blend_ps(0xCCCC, _mm512_add_ps(a, b), _mm512_sub_ps(b, a));
        b = _mm512_shuffle_f32x4(a, a, 0xB1);                        // len 4: j ^ 4 (128-bit lanes 1, 0, 3, 2)
        a = _mm512_mask_blend_ps(0xF0F0, _mm512_add_ps(a, b), _mm512_sub_ps(b, a));
        b = _mm512_shuffle_f32x4(a, a, 0x4E);                        // len 8: j ^ 8 (lanes 2, 3, 0, 1)
        a = _mm512_mask_blend_ps(0xFF00, _mm512_add_ps(a, b), _mm512_sub_ps(b, a));
        _mm512_storeu_ps(dst + i, a);
    }
    return 16;
#elif defined(__AVX2__)
    if (n % 8 != 0) {
        return 1;
    }
    const __m256 vs = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(src + i), vs);
        __m256 b = _mm256_permute_ps(a, 0xB1);                       // len 1
        a = _mm256_blend_ps(_mm256_add_ps(a, b), _mm256_sub_ps(b, a), 0xAA);
        b = _mm256_permute_ps(a, 0x4E);                              // len 2
        a = _mm256_blend_ps(_mm256_add_ps(a, b), _mm256_sub_ps(b, a), 0xCC);
        b = _mm256_permute2f128_ps(a, a, 0x01);                      // len 4
        a = _mm256_blend_ps(_mm256_add_ps(a, b), _mm256_sub_ps(b, a), 0xF0);
        _mm256_storeu_ps(dst + i, a);
    }
    return 8;
#else
    (void) src; (void) dst; (void) n; (void) scale;
    return 1;
#endif
}
