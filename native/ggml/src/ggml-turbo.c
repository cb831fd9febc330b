// tqgguf: CPU codec of the turbo KV-cache types (turbo4_0, turbo3_0, turbo2_0).
//
// Formats: ggml-turbo-common.h. Codebooks: ggml-turbo-tables.h (generated). Reference:
// tqgguf/reference/codec.py, which reproduces every byte written here. To make that possible
// the encoders use one canonical summation order for the 64 values of a block (8 lane-wise
// partial sums over rows of 8, then a fixed tree), in the scalar and in the AVX2 code alike,
// and this file is compiled with -ffp-contract=off (no fused multiply-add in the encoders).
//
// Method: TurboQuant (Zandieh et al., arXiv 2504.19874) scalar Lloyd-Max quantization of
// rotated coordinates; the rotation itself is llama.cpp's graph-level Hadamard transform
// (llama-kv-cache.cpp, attn_rot_k / attn_rot_v), applied before the cache write.

#define GGML_COMMON_DECL_C
#include "ggml-common.h"
#include "ggml-impl.h"
#include "ggml-turbo.h"
#include "ggml-turbo-tables.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define TURBO_HAVE_X86_DISPATCH 1
#include <immintrin.h>
static int turbo_simd_cached = -1;
#endif

// query rows per pass of ggml_turbo_vec_dot_multi (its accumulators live on the stack)
#define TURBO_DOT_MULTI_MAX 16

static const float turbo4_c[16] = GGML_TURBO4_CENTROIDS;
static const float turbo4_b[15] = GGML_TURBO4_BOUNDARIES;
static const float turbo3_c[8]  = GGML_TURBO3_CENTROIDS;
static const float turbo3_b[7]  = GGML_TURBO3_BOUNDARIES;
static const float turbo2_c[4]  = GGML_TURBO2_CENTROIDS;
static const float turbo2_b[3]  = GGML_TURBO2_BOUNDARIES;
static const float turbo_inv_grid[GGML_TURBO_SEARCH_STEPS] = GGML_TURBO_SEARCH_INV_GRID;

// turbo2's codebook twice, the 8-entry SIMD table: an 8-lane permute reads only index bits
// 0..2, so the bit above an element's own 2 (a neighbour's, or 0) picks a copy and needs no mask.
static const struct { float c[2][4]; } turbo2_c8 = { { GGML_TURBO2_CENTROIDS, GGML_TURBO2_CENTROIDS } };

#define TURBO_FP16_MAX 65504.0f

typedef struct {
    const float * c;    // centroids, ascending
    const float * b;    // decision boundaries (midpoints), ascending
    int levels;
    const float * t;    // SIMD table: the centroids, at least 8 entries (turbo2: twice)
} turbo_codebook;

static const turbo_codebook turbo4_cb = { turbo4_c, turbo4_b, 16, turbo4_c };
static const turbo_codebook turbo3_cb = { turbo3_c, turbo3_b, 8,  turbo3_c };
static const turbo_codebook turbo2_cb = { turbo2_c, turbo2_b, 4,  (const float *) &turbo2_c8 };

int ggml_type_count(void) {
    return GGML_TYPE_COUNT;
}

// ---------------------------------------------------------------------------------------
// portable building blocks

// The fixed tree of the canonical sum: ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)).
static inline float turbo_tree8(const float * acc) {
    const float a0 = acc[0] + acc[4];
    const float a1 = acc[1] + acc[5];
    const float a2 = acc[2] + acc[6];
    const float a3 = acc[3] + acc[7];
    return (a0 + a2) + (a1 + a3);
}

// Canonical sum of 64 floats: acc[l] = sum_r p[8r + l] (r ascending), then turbo_tree8.
static inline float turbo_sum64(const float * p) {
    float acc[8] = { 0 };
    for (int r = 0; r < 8; ++r) {
        for (int l = 0; l < 8; ++l) {
            acc[l] += p[8*r + l];
        }
    }
    return turbo_tree8(acc);
}

// Index of the nearest centroid = number of boundaries strictly below v (branch-light
// binary search over the sorted boundaries; levels is a power of two).
static inline int turbo_nearest(const turbo_codebook * cb, float v) {
    int i = 0;
    for (int step = cb->levels / 2; step >= 1; step /= 2) {
        i += (v > cb->b[i + step - 1]) ? step : 0;
    }
    return i;
}

// saturate to the fp16 range (never +-inf in the block header)
static inline float turbo_clamp_scale(float d) {
    return d > TURBO_FP16_MAX ? TURBO_FP16_MAX : (d < -TURBO_FP16_MAX ? -TURBO_FP16_MAX : d);
}

// Encode one block of 64 values into a scale and 64 centroid indices.
static void turbo_encode_block_scalar(const turbo_codebook * cb, const float * x, int search,
                                      float * d_out, uint8_t * idx) {
    float tmp[QK_TURBO];
    for (int j = 0; j < QK_TURBO; ++j) {
        tmp[j] = x[j]*x[j];
    }
    const float n = sqrtf(turbo_sum64(tmp));
    if (n == 0.0f) {
        memset(idx, turbo_nearest(cb, 0.0f), QK_TURBO);
        *d_out = 0.0f;
        return;
    }
    const float inv = 1.0f/n;
    if (!search) {
        for (int j = 0; j < QK_TURBO; ++j) {
            idx[j] = (uint8_t) turbo_nearest(cb, x[j]*inv);
            tmp[j] = cb->c[idx[j]]*cb->c[idx[j]];
        }
        *d_out = turbo_clamp_scale(n/sqrtf(turbo_sum64(tmp)));
        return;
    }
    float best_score = -1.0f, best_dot = 0.0f, best_den = 1.0f;
    float prod[QK_TURBO];
    uint8_t cand[QK_TURBO];
    memset(idx, 0, QK_TURBO);  // a NaN block never beats the start score: indices 0, d = 0
    for (int k = 0; k < GGML_TURBO_SEARCH_STEPS; ++k) {
        const float s = inv*turbo_inv_grid[k];
        for (int j = 0; j < QK_TURBO; ++j) {
            cand[j] = (uint8_t) turbo_nearest(cb, x[j]*s);
            const float c = cb->c[cand[j]];
            prod[j] = x[j]*c;
            tmp[j]  = c*c;
        }
        const float dot = turbo_sum64(prod);
        const float den = turbo_sum64(tmp);
        const float score = dot*dot/den;
        if (score > best_score) {
            best_score = score;
            best_dot   = dot;
            best_den   = den;
            memcpy(idx, cand, QK_TURBO);
        }
    }
    *d_out = turbo_clamp_scale(best_dot/best_den);
}

// ---------------------------------------------------------------------------------------
// bit packing (layout documented in ggml-turbo-common.h)

static void turbo4_pack(block_turbo4_0 * y, float d, const uint8_t * idx) {
    y->d = GGML_FP32_TO_FP16(d);
    for (int j = 0; j < QK_TURBO/2; ++j) {
        y->qs[j] = (uint8_t) ((idx[j] & 15) | ((idx[j + QK_TURBO/2] & 15) << 4));
    }
}

// turbo3: word w_l (l = 0..7) holds the indices of elements l, l + 8, ..., l + 56 at bits
// 0, 3, ..., 21; its bytes are qs[l], qs[l + 8], qs[l + 16]
static void turbo3_pack(block_turbo3_0 * y, float d, const uint8_t * idx) {
    y->d = GGML_FP32_TO_FP16(d);
    for (int l = 0; l < 8; ++l) {
        uint32_t w = 0;
        for (int r = 0; r < 8; ++r) {
            w |= (uint32_t) (idx[8*r + l] & 7) << (3*r);
        }
        y->qs[l]      = (uint8_t) (w & 255);
        y->qs[l + 8]  = (uint8_t) ((w >> 8) & 255);
        y->qs[l + 16] = (uint8_t) (w >> 16);
    }
}

static void turbo2_pack(block_turbo2_0 * y, float d, const uint8_t * idx) {
    y->d = GGML_FP32_TO_FP16(d);
    for (int j = 0; j < 16; ++j) {
        y->qs[j] = (uint8_t) ((idx[j] & 3) | ((idx[j + 16] & 3) << 2) | ((idx[j + 32] & 3) << 4) | ((idx[j + 48] & 3) << 6));
    }
}

// ---------------------------------------------------------------------------------------
// SIMD paths, chosen at run time (turbo_simd()):
//   1 = AVX2+FMA+F16C: encoders and decoders;
//   2 = AVX-512F+VL: the encoders search sixteen values per register (turbo_encode_block_avx512) and the
//       turbo4 decoder uses the two-table permute vpermt2ps; the rest as 1.
// The encoders write the scalar encoder's bytes and the decoders its floats, bit for bit:
// a decoded value is the one product d * c[idx] in every path. The decoders scale the
// table by d once per block and then only permute.

#ifdef TURBO_HAVE_X86_DISPATCH

#define TURBO_AVX2   __attribute__((target("avx2,fma,f16c")))
#define TURBO_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))

TURBO_AVX2 static inline float turbo_hsum8_canonical(__m256 acc) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)); // a0..a3
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                           // a0+a2, a1+a3
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

// table lookup of 8 indices (0..levels-1) from centroids held in lo (0..7) and hi (8..15)
TURBO_AVX2 static inline __m256 turbo_lookup(__m256i idx, __m256 lo, __m256 hi, int levels) {
    const __m256 vlo = _mm256_permutevar8x32_ps(lo, idx);
    if (levels <= 8) {
        return vlo;
    }
    const __m256 vhi = _mm256_permutevar8x32_ps(hi, idx);
    const __m256 use_hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(vlo, vhi, use_hi);
}

// The SIMD encoders' choice among the candidate scales, from each one's dot = sum x c and den = sum c^2 (k = 0 ..
// GGML_TURBO_SEARCH_STEPS - 1; with !search only k = 0, the scale 1/n): the scalar encoder's rule, the first strictly
// greater score dot^2/den. Returns the winner, or -1 when none beats the start score (a NaN block: indices 0, d = 0/1
// as the scalar encoder leaves them); *d_num / *d_den: the scale's numerator and denominator (!search: n and the
// norm of the centroids).
static inline int turbo_pick(int search, float n, const float * dot, const float * den, float * d_num, float * d_den) {
    if (!search) {
        *d_num = n;
        *d_den = sqrtf(den[0]);
        return 0;
    }
    int best_k = -1;
    float best_score = -1.0f;
    *d_num = 0.0f;
    *d_den = 1.0f;
    for (int k = 0; k < GGML_TURBO_SEARCH_STEPS; ++k) {
        const float score = dot[k]*dot[k]/den[k];
        if (score > best_score) {
            best_score = score;
            *d_num     = dot[k];
            *d_den     = den[k];
            best_k     = k;
        }
    }
    return best_k;
}

// Nearest centroid index of 8 values: the number of boundaries below each (turbo_nearest's answer: the boundaries
// ascend), counted for up to 7 boundaries; for turbo4's 15, turbo_nearest's binary search: b[7], then b[3] or b[11]
// by a blend, then b[i + 1] and b[i] from registers of the boundaries at those positions (vpermps by i/4, i/2).
// todd = (b1, b5, b9, b13, ..), teven = (b0, b2, .., b14).
TURBO_AVX2 static inline __m256i turbo_nearest8(__m256 v, const turbo_codebook * cb, const __m256 * bnd, __m256 todd, __m256 teven) {
    const int L = cb->levels;
    if (L <= 8) {
        __m256i q = _mm256_setzero_si256();
        for (int i = 0; i < L - 1; ++i) {
            q = _mm256_sub_epi32(q, _mm256_castps_si256(_mm256_cmp_ps(v, bnd[i], _CMP_GT_OQ)));
        }
        return q;
    }
    const __m256 m8 = _mm256_cmp_ps(v, bnd[7], _CMP_GT_OQ);
    __m256i q = _mm256_and_si256(_mm256_castps_si256(m8), _mm256_set1_epi32(8));
    const __m256 m4 = _mm256_cmp_ps(v, _mm256_blendv_ps(bnd[3], bnd[11], m8), _CMP_GT_OQ);
    q = _mm256_add_epi32(q, _mm256_and_si256(_mm256_castps_si256(m4), _mm256_set1_epi32(4)));
    const __m256 m2 = _mm256_cmp_ps(v, _mm256_permutevar8x32_ps(todd, _mm256_srli_epi32(q, 2)), _CMP_GT_OQ);
    q = _mm256_add_epi32(q, _mm256_and_si256(_mm256_castps_si256(m2), _mm256_set1_epi32(2)));
    const __m256 m1 = _mm256_cmp_ps(v, _mm256_permutevar8x32_ps(teven, _mm256_srli_epi32(q, 1)), _CMP_GT_OQ);
    return _mm256_add_epi32(q, _mm256_and_si256(_mm256_castps_si256(m1), _mm256_set1_epi32(1)));
}

// The AVX2 encoder: the 16 candidate scales scored first, independent of each other, and chosen after by the scalar
// loop's rule (the first strictly greater score); the winner's indices computed once more. Each sum runs over the
// rows in order per column (the canonical sum), so the bytes are the scalar encoder's.
TURBO_AVX2 static void turbo_encode_block_avx2(const turbo_codebook * cb, const float * x, int search,
                                               float * d_out, uint8_t * idx) {
    __m256 xv[8];
    __m256 acc = _mm256_setzero_ps();
    for (int r = 0; r < 8; ++r) {
        xv[r] = _mm256_loadu_ps(x + 8*r);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(xv[r], xv[r]));
    }
    const float n = sqrtf(turbo_hsum8_canonical(acc));
    if (n == 0.0f) {
        memset(idx, turbo_nearest(cb, 0.0f), QK_TURBO);
        *d_out = 0.0f;
        return;
    }
    const float inv = 1.0f/n;
    const __m256 lo = _mm256_loadu_ps(cb->t);
    const __m256 hi = cb->levels > 8 ? _mm256_loadu_ps(cb->t + 8) : lo;
    __m256 bnd[15];
    for (int i = 0; i < cb->levels - 1; ++i) {
        bnd[i] = _mm256_set1_ps(cb->b[i]);
    }
    __m256 todd = lo, teven = lo;
    if (cb->levels == 16) {
        todd  = _mm256_setr_ps(cb->b[1], cb->b[5], cb->b[9], cb->b[13], 0.0f, 0.0f, 0.0f, 0.0f);
        teven = _mm256_setr_ps(cb->b[0], cb->b[2], cb->b[4], cb->b[6], cb->b[8], cb->b[10], cb->b[12], cb->b[14]);
    }
    const int steps = search ? GGML_TURBO_SEARCH_STEPS : 1;
    float dot[GGML_TURBO_SEARCH_STEPS], den[GGML_TURBO_SEARCH_STEPS];
    for (int k = 0; k < steps; ++k) {
        const __m256 s = _mm256_set1_ps(search ? inv*turbo_inv_grid[k] : inv);
        __m256 acc_dot = _mm256_setzero_ps();
        __m256 acc_den = _mm256_setzero_ps();
        for (int r = 0; r < 8; ++r) {
            const __m256 c = turbo_lookup(turbo_nearest8(_mm256_mul_ps(xv[r], s), cb, bnd, todd, teven), lo, hi, cb->levels);
            acc_dot = _mm256_add_ps(acc_dot, _mm256_mul_ps(xv[r], c));
            acc_den = _mm256_add_ps(acc_den, _mm256_mul_ps(c, c));
        }
        dot[k] = turbo_hsum8_canonical(acc_dot);
        den[k] = turbo_hsum8_canonical(acc_den);
    }
    float best_dot, best_den;
    const int best_k = turbo_pick(search, n, dot, den, &best_dot, &best_den);
    const __m256 s = _mm256_set1_ps(search ? inv*turbo_inv_grid[best_k < 0 ? 0 : best_k] : inv);
    for (int r = 0; r < 8; ++r) {
        int32_t q[8];
        _mm256_storeu_si256((__m256i *) q, best_k < 0 ? _mm256_setzero_si256() : turbo_nearest8(_mm256_mul_ps(xv[r], s), cb, bnd, todd, teven));
        for (int j = 0; j < 8; ++j) {
            idx[8*r + j] = (uint8_t) q[j];
        }
    }
    *d_out = turbo_clamp_scale(best_dot/best_den);
}

// The AVX-512 encoder: the same search as turbo_encode_block_avx2, sixteen values (rows 2i and 2i + 1 of the
// block) per register. The nearest centroid is the number of boundaries below the value (turbo_nearest's answer:
// the boundaries ascend), counted by compare-to-mask and masked add for up to 7 boundaries; for turbo4's 15 it is
// turbo_nearest's binary search itself, each step after the first reading the boundary b[i + step - 1] of each lane
// from a register of the boundaries (vpermps). The centroid is one more permute. The 16 candidate scales are scored
// first, independent of each other, and chosen after by the scalar loop's rule (the first strictly greater score);
// the winner's indices are then computed once more. The canonical sums take each row's half of a register in order
// (row 2i, then 2i + 1): every comparison, product and sum is the scalar encoder's, and the bytes are its bytes.
TURBO_AVX512 static inline __m256 turbo_hi256(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

TURBO_AVX512 static inline __m512i turbo_nearest16(__m512 v, const turbo_codebook * cb, __m512 tb) {
    const int L = cb->levels;
    __m512i q = _mm512_setzero_si512();
    if (L <= 8) {
        const __m512i one = _mm512_set1_epi32(1);
        for (int j = 0; j < L - 1; ++j) {
            q = _mm512_mask_add_epi32(q, _mm512_cmp_ps_mask(v, _mm512_set1_ps(cb->b[j]), _CMP_GT_OQ), q, one);
        }
        return q;
    }
    q = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, _mm512_set1_ps(cb->b[L/2 - 1]), _CMP_GT_OQ), _mm512_set1_epi32(L/2));
    for (int step = L/4; step >= 1; step /= 2) {
        const __m512 t = _mm512_permutexvar_ps(_mm512_add_epi32(q, _mm512_set1_epi32(step - 1)), tb);
        q = _mm512_mask_add_epi32(q, _mm512_cmp_ps_mask(v, t, _CMP_GT_OQ), q, _mm512_set1_epi32(step));
    }
    return q;
}

TURBO_AVX512 static void turbo_encode_block_avx512(const turbo_codebook * cb, const float * x, int search,
                                                   float * d_out, uint8_t * idx) {
    __m512 xv[4];
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
        xv[i] = _mm512_loadu_ps(x + 16*i);
        const __m512 sq = _mm512_mul_ps(xv[i], xv[i]);
        acc = _mm256_add_ps(acc, _mm512_castps512_ps256(sq));  // row 2i
        acc = _mm256_add_ps(acc, turbo_hi256(sq));             // row 2i + 1
    }
    const float n = sqrtf(turbo_hsum8_canonical(acc));
    if (n == 0.0f) {
        memset(idx, turbo_nearest(cb, 0.0f), QK_TURBO);
        *d_out = 0.0f;
        return;
    }
    const float inv = 1.0f/n;
    const int L = cb->levels;
    const __m512 tb = _mm512_maskz_loadu_ps((__mmask16) ((1u << (L - 1)) - 1), cb->b);  // boundaries b[0 .. L-2]
    const __m512 tc = _mm512_maskz_loadu_ps((__mmask16) ((1u << L) - 1), cb->c);        // centroids c[0 .. L-1]
    const int steps = search ? GGML_TURBO_SEARCH_STEPS : 1;
    float dot[GGML_TURBO_SEARCH_STEPS], den[GGML_TURBO_SEARCH_STEPS];
    for (int k = 0; k < steps; ++k) {
        const __m512 s = _mm512_set1_ps(search ? inv*turbo_inv_grid[k] : inv);
        __m256 acc_dot = _mm256_setzero_ps();
        __m256 acc_den = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            const __m512 c  = _mm512_permutexvar_ps(turbo_nearest16(_mm512_mul_ps(xv[i], s), cb, tb), tc);
            const __m512 p  = _mm512_mul_ps(xv[i], c);
            const __m512 cc = _mm512_mul_ps(c, c);
            acc_dot = _mm256_add_ps(acc_dot, _mm512_castps512_ps256(p));
            acc_dot = _mm256_add_ps(acc_dot, turbo_hi256(p));
            acc_den = _mm256_add_ps(acc_den, _mm512_castps512_ps256(cc));
            acc_den = _mm256_add_ps(acc_den, turbo_hi256(cc));
        }
        dot[k] = turbo_hsum8_canonical(acc_dot);
        den[k] = turbo_hsum8_canonical(acc_den);
    }
    float best_dot, best_den;
    const int best_k = turbo_pick(search, n, dot, den, &best_dot, &best_den);
    const __m512 s = _mm512_set1_ps(search ? inv*turbo_inv_grid[best_k < 0 ? 0 : best_k] : inv);
    for (int i = 0; i < 4; ++i) {
        const __m512i q = best_k < 0 ? _mm512_setzero_si512() : turbo_nearest16(_mm512_mul_ps(xv[i], s), cb, tb);
        _mm_storeu_si128((__m128i *) (idx + 16*i), _mm512_cvtepi32_epi8(q));
    }
    *d_out = turbo_clamp_scale(best_dot/best_den);
}

// --- AVX2 block decoders: out[r] = values 8r .. 8r+7 of the block, already times d

// 8 bytes p[0..7] zero-extended to int32 lanes
TURBO_AVX2 static inline __m256i turbo_u8x8(const uint8_t * p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) p));
}

// the 8 turbo3 words w_l = qs[l] | qs[l+8] << 8 | qs[l+16] << 16
TURBO_AVX2 static inline __m256i turbo3_words(const uint8_t * qs) {
    return _mm256_or_si256(_mm256_or_si256(turbo_u8x8(qs), _mm256_slli_epi32(turbo_u8x8(qs + 8), 8)),
                           _mm256_slli_epi32(turbo_u8x8(qs + 16), 16));
}

TURBO_AVX2 static inline __m256 turbo_scale8(ggml_half d, const float * t) {
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(d)), _mm256_loadu_ps(t));
}

TURBO_AVX2 static inline void turbo4_decode_avx2(const block_turbo4_0 * x, __m256 out[8]) {
    const __m256 lo = turbo_scale8(x->d, turbo4_c);      // d * c[0..7]
    const __m256 hi = turbo_scale8(x->d, turbo4_c + 8);  // d * c[8..15]
    for (int r = 0; r < 4; ++r) {
        const __m256i b  = turbo_u8x8(x->qs + 8*r);  // low nibble: element 8r+l, high: 8r+l+32
        const __m256i bh = _mm256_srli_epi32(b, 4);
        // the permutes read index bits 0..2; bit 3 (3 of b, 7 of b) picks the table via the sign
        out[r]     = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, b),  _mm256_permutevar8x32_ps(hi, b),
                                      _mm256_castsi256_ps(_mm256_slli_epi32(b, 28)));
        out[r + 4] = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, bh), _mm256_permutevar8x32_ps(hi, bh),
                                      _mm256_castsi256_ps(_mm256_slli_epi32(b, 24)));
    }
}

TURBO_AVX2 static inline void turbo3_decode_avx2(const block_turbo3_0 * x, __m256 out[8]) {
    const __m256  t = turbo_scale8(x->d, turbo3_c);
    const __m256i w = turbo3_words(x->qs);
    out[0] = _mm256_permutevar8x32_ps(t, w);
    out[1] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(w, 3));
    out[2] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(w, 6));
    out[3] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(w, 9));
    out[4] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(w, 12));
    out[5] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(w, 15));
    out[6] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(w, 18));
    out[7] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(w, 21));
}

TURBO_AVX2 static inline void turbo2_decode_avx2(const block_turbo2_0 * x, __m256 out[8]) {
    const __m256  t = turbo_scale8(x->d, turbo2_cb.t);  // c[0..3] twice
    const __m256i a = turbo_u8x8(x->qs);      // elements l + 16s at bits 2s (l < 8)
    const __m256i b = turbo_u8x8(x->qs + 8);  // elements 8 + l + 16s
    out[0] = _mm256_permutevar8x32_ps(t, a);
    out[1] = _mm256_permutevar8x32_ps(t, b);
    out[2] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(a, 2));
    out[3] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(b, 2));
    out[4] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(a, 4));
    out[5] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(b, 4));
    out[6] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(a, 6));
    out[7] = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(b, 6));
}

// --- AVX-512VL block decoder (256-bit registers): one two-table permute per 8 turbo4 values.
// turbo3 and turbo2 already need one permute per 8 values, so level 2 runs their AVX2 code.
// (Measured on a Skylake-SP Xeon: 512-bit versions of all three decoders, 16 values per
// _mm512_permutexvar_ps, were 5-13% slower for dequantize_row and 10-33% slower for the
// one-block vec_dot that flash attention calls per key; docs/DESIGN.md, "Bit layout".)

TURBO_AVX512 static inline void turbo4_decode_avx512(const block_turbo4_0 * x, __m256 out[8]) {
    const __m256 lo = turbo_scale8(x->d, turbo4_c);      // d * c[0..7]
    const __m256 hi = turbo_scale8(x->d, turbo4_c + 8);  // d * c[8..15]
    for (int r = 0; r < 4; ++r) {
        const __m256i b = turbo_u8x8(x->qs + 8*r);
        // vpermt2ps reads index bits 0..3: bit 3 picks lo or hi
        out[r]     = _mm256_permutex2var_ps(lo, b, hi);
        out[r + 4] = _mm256_permutex2var_ps(lo, _mm256_srli_epi32(b, 4), hi);
    }
}

// --- row functions per type and level

#define TURBO_DEFINE_SIMD_ROWS(N, ISA, TARGET)                                                      \
TARGET static void turbo##N##_dequantize_##ISA(const block_turbo##N##_0 * x, float * y, int64_t nb) { \
    for (int64_t i = 0; i < nb; ++i) {                                                              \
        __m256 out[8];                                                                              \
        turbo##N##_decode_##ISA(x + i, out);                                                        \
        for (int r = 0; r < 8; ++r) {                                                               \
            _mm256_storeu_ps(y + i*QK_TURBO + 8*r, out[r]);                                         \
        }                                                                                           \
    }                                                                                               \
}                                                                                                   \
TARGET static void turbo##N##_dot_##ISA(const block_turbo##N##_0 * x, const float * y, int64_t nb, float * s) { \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                  \
    for (int64_t i = 0; i < nb; ++i) {                                                              \
        __m256 out[8];                                                                              \
        turbo##N##_decode_##ISA(x + i, out);                                                        \
        const float * yb = y + i*QK_TURBO;                                                          \
        for (int r = 0; r < 8; r += 2) {                                                            \
            acc0 = _mm256_fmadd_ps(out[r],     _mm256_loadu_ps(yb + 8*r),     acc0);                \
            acc1 = _mm256_fmadd_ps(out[r + 1], _mm256_loadu_ps(yb + 8*r + 8), acc1);                \
        }                                                                                           \
    }                                                                                               \
    *s = turbo_hsum8_canonical(_mm256_add_ps(acc0, acc1));                                          \
}

// nq dot products of one row (turbo##N##_dot_##ISA against y + h*ldy, h < nq <= TURBO_DOT_MULTI_MAX):
// each block decoded once, each product accumulated exactly as the one-row dot accumulates it
#define TURBO_DEFINE_SIMD_DOT_MULTI(N, ISA, TARGET)                                                 \
TARGET static void turbo##N##_dot_multi_##ISA(const block_turbo##N##_0 * x, const float * y, int64_t ldy, \
                                               int nq, int64_t nb, float * s) {                     \
    __m256 acc[TURBO_DOT_MULTI_MAX][2];                                                             \
    for (int h = 0; h < nq; ++h) {                                                                  \
        acc[h][0] = _mm256_setzero_ps();                                                            \
        acc[h][1] = _mm256_setzero_ps();                                                            \
    }                                                                                               \
    for (int64_t i = 0; i < nb; ++i) {                                                              \
        __m256 out[8];                                                                              \
        turbo##N##_decode_##ISA(x + i, out);                                                        \
        for (int h = 0; h < nq; ++h) {                                                              \
            const float * yb = y + h*ldy + i*QK_TURBO;                                              \
            for (int r = 0; r < 8; r += 2) {                                                        \
                acc[h][0] = _mm256_fmadd_ps(out[r],     _mm256_loadu_ps(yb + 8*r),     acc[h][0]);  \
                acc[h][1] = _mm256_fmadd_ps(out[r + 1], _mm256_loadu_ps(yb + 8*r + 8), acc[h][1]);  \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    for (int h = 0; h < nq; ++h) {                                                                  \
        s[h] = turbo_hsum8_canonical(_mm256_add_ps(acc[h][0], acc[h][1]));                          \
    }                                                                                               \
}

TURBO_DEFINE_SIMD_ROWS(4, avx2,   TURBO_AVX2)
TURBO_DEFINE_SIMD_ROWS(3, avx2,   TURBO_AVX2)
TURBO_DEFINE_SIMD_ROWS(2, avx2,   TURBO_AVX2)
TURBO_DEFINE_SIMD_ROWS(4, avx512, TURBO_AVX512)
TURBO_DEFINE_SIMD_DOT_MULTI(4, avx2,   TURBO_AVX2)
TURBO_DEFINE_SIMD_DOT_MULTI(3, avx2,   TURBO_AVX2)
TURBO_DEFINE_SIMD_DOT_MULTI(2, avx2,   TURBO_AVX2)
TURBO_DEFINE_SIMD_DOT_MULTI(4, avx512, TURBO_AVX512)
#define turbo3_dequantize_avx512 turbo3_dequantize_avx2
#define turbo3_dot_avx512        turbo3_dot_avx2
#define turbo3_dot_multi_avx512  turbo3_dot_multi_avx2
#define turbo2_dequantize_avx512 turbo2_dequantize_avx2
#define turbo2_dot_avx512        turbo2_dot_avx2
#define turbo2_dot_multi_avx512  turbo2_dot_multi_avx2

// 0 portable, 1 AVX2+FMA+F16C, 2 AVX-512F+VL; GGML_TURBO_NO_SIMD=1 forces 0 and
// GGML_TURBO_SIMD_MAX=n caps the level at n (tests compare every level with the portable code).
static int turbo_simd(void) {
    int level = __atomic_load_n(&turbo_simd_cached, __ATOMIC_RELAXED);
    if (level < 0) {
        __builtin_cpu_init();
        level = 0;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
            level = (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) ? 2 : 1;
        }
        const char * env = getenv("GGML_TURBO_SIMD_MAX");
        if (env && *env && atoi(env) < level) {
            level = atoi(env) < 0 ? 0 : atoi(env);
        }
        env = getenv("GGML_TURBO_NO_SIMD");
        if (env && atoi(env)) {
            level = 0;
        }
        __atomic_store_n(&turbo_simd_cached, level, __ATOMIC_RELAXED);
    }
    return level;
}
#else
static int turbo_simd(void) { return 0; }
#endif // TURBO_HAVE_X86_DISPATCH

int ggml_turbo_simd_level(void) {
    return turbo_simd();
}

// ---------------------------------------------------------------------------------------
// row functions

static void turbo_encode_block(const turbo_codebook * cb, const float * x, int search, float * d, uint8_t * idx) {
#ifdef TURBO_HAVE_X86_DISPATCH
    if (turbo_simd() >= 2) {
        turbo_encode_block_avx512(cb, x, search, d, idx);
        return;
    }
    if (turbo_simd() >= 1) {
        turbo_encode_block_avx2(cb, x, search, d, idx);
        return;
    }
#endif
    turbo_encode_block_scalar(cb, x, search, d, idx);
}

#define TURBO_DEFINE_QUANTIZE(N)                                                                    \
static void quantize_row_turbo##N##_0_impl(const float * GGML_RESTRICT x, void * GGML_RESTRICT vy, \
                                           int64_t k, int search) {                                \
    assert(k % QK_TURBO == 0);                                                                      \
    block_turbo##N##_0 * y = (block_turbo##N##_0 *) vy;                                             \
    uint8_t idx[QK_TURBO];                                                                          \
    for (int64_t i = 0; i < k / QK_TURBO; ++i) {                                                    \
        float d;                                                                                    \
        turbo_encode_block(&turbo##N##_cb, x + i*QK_TURBO, search, &d, idx);                        \
        turbo##N##_pack(y + i, d, idx);                                                             \
    }                                                                                               \
}                                                                                                   \
void quantize_row_turbo##N##_0_ref(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k) { \
    quantize_row_turbo##N##_0_impl(x, y, k, 0);                                                     \
}                                                                                                   \
void quantize_row_turbo##N##_0(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k) { \
    quantize_row_turbo##N##_0_impl(x, y, k, 1);                                                     \
}                                                                                                   \
size_t quantize_turbo##N##_0(const float * GGML_RESTRICT src, void * GGML_RESTRICT dst,           \
                             int64_t nrows, int64_t n_per_row, const float * imatrix) {            \
    (void) imatrix;                                                                                 \
    const size_t row_size = ggml_row_size(GGML_TYPE_TURBO##N##_0, n_per_row);                       \
    for (int64_t r = 0; r < nrows; ++r) {                                                           \
        quantize_row_turbo##N##_0(src + r*n_per_row, (char *) dst + r*row_size, n_per_row);         \
    }                                                                                               \
    return nrows*row_size;                                                                          \
}

TURBO_DEFINE_QUANTIZE(4)
TURBO_DEFINE_QUANTIZE(3)
TURBO_DEFINE_QUANTIZE(2)

// The exported row functions only dispatch, every branch a tail call (the first call goes
// through turbo##N##_*_first, which detects the CPU), so the per-call cost on the flash-
// attention path (one vec_dot and one dequantize_row per key and head) stays small.
#ifdef TURBO_HAVE_X86_DISPATCH
#define TURBO_SIMD_LEVEL() __atomic_load_n(&turbo_simd_cached, __ATOMIC_RELAXED)
#define TURBO_SIMD_DEQUANT(N)                                                                       \
        case 2:  turbo##N##_dequantize_avx512(x, y, nb); return;                                    \
        case 1:  turbo##N##_dequantize_avx2(x, y, nb);   return;
#define TURBO_SIMD_DOT(N)                                                                           \
        case 2:  turbo##N##_dot_avx512(x, (const float *) vy, nb, s); return;                       \
        case 1:  turbo##N##_dot_avx2(x, (const float *) vy, nb, s);   return;
#define TURBO_SIMD_DOT_MULTI(N)                                                                     \
        case 2:  turbo##N##_dot_multi_avx512(x, y, ldy, nq, nb, s); return;                         \
        case 1:  turbo##N##_dot_multi_avx2(x, y, ldy, nq, nb, s);   return;
#else
#define TURBO_SIMD_LEVEL() 0
#define TURBO_SIMD_DEQUANT(N)
#define TURBO_SIMD_DOT(N)
#define TURBO_SIMD_DOT_MULTI(N)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TURBO_NOINLINE __attribute__((noinline))
#else
#define TURBO_NOINLINE
#endif

// The portable decoders (every CPU without the x86 paths: Arm, RISC-V, ...). A block's 64
// table entries are gathered in element order first (turbo{4,3,2}_lookup, which walk the
// packed bytes as the formats lay them out instead of asking per element), so what follows is
// plain loops over floats that the compiler vectorizes with the target's baseline SIMD (SSE2,
// NEON). dequantize: the table scaled by d once per block (d * c[k], the same one product per
// value as before), then looked up. dot: 64 products summed in the canonical order of
// turbo_sum64 (8 lane sums over rows of 8, then the fixed tree), the same in vec_dot and in
// vec_dot_multi, so the two stay bit-identical; d applied once per block. This order differs
// from the x86 paths' (within float rounding: tests/test_native_codec.py).
// GCC's vectorizer turns these table lookups into vector stores and byte reloads through the
// stack, 1.9x slower than the scalar loop (dequantize_row_turbo4_0, x86-64 baseline, GCC 12):
// they are kept scalar; the float loops that use them are vectorized as usual.
#if defined(__GNUC__) && !defined(__clang__)
#define TURBO_SCALAR_LOOKUP __attribute__((optimize("no-tree-vectorize")))
#else
#define TURBO_SCALAR_LOOKUP
#endif

TURBO_SCALAR_LOOKUP static inline void turbo4_lookup(const block_turbo4_0 * x, const float * tab, float * out) {
    for (int l = 0; l < QK_TURBO/2; ++l) {  // byte l: element l (low nibble), l + 32 (high)
        const uint8_t b = x->qs[l];
        out[l]              = tab[b & 15];
        out[l + QK_TURBO/2] = tab[b >> 4];
    }
}

TURBO_SCALAR_LOOKUP static inline void turbo3_lookup(const block_turbo3_0 * x, const float * tab, float * out) {
    for (int l = 0; l < 8; ++l) {  // bytes l, l + 8, l + 16: elements l, 8 + l, ..., 56 + l
        const uint32_t w = (uint32_t) x->qs[l] | ((uint32_t) x->qs[l + 8] << 8) | ((uint32_t) x->qs[l + 16] << 16);
        for (int r = 0; r < 8; ++r) {
            out[8*r + l] = tab[(w >> (3*r)) & 7];
        }
    }
}

TURBO_SCALAR_LOOKUP static inline void turbo2_lookup(const block_turbo2_0 * x, const float * tab, float * out) {
    for (int l = 0; l < 16; ++l) {  // byte l: elements l, 16 + l, 32 + l, 48 + l
        const uint8_t b = x->qs[l];
        for (int r = 0; r < 4; ++r) {
            out[16*r + l] = tab[(b >> (2*r)) & 3];
        }
    }
}

// sum of c[j] * y[j] over 64 values in turbo_sum64's order
static inline float turbo_dot64(const float * c, const float * y) {
    float acc[8] = { 0 };
    for (int r = 0; r < 8; ++r) {
        for (int l = 0; l < 8; ++l) {
            acc[l] += c[8*r + l]*y[8*r + l];
        }
    }
    return turbo_tree8(acc);
}

#define TURBO_DEFINE_DECODE(N)                                                                      \
TURBO_NOINLINE static void turbo##N##_dequantize_scalar(const block_turbo##N##_0 * x, float * y, int64_t nb) { \
    enum { levels = (int) (sizeof(turbo##N##_c)/sizeof(turbo##N##_c[0])) };                        \
    for (int64_t i = 0; i < nb; ++i) {                                                              \
        const float d = GGML_FP16_TO_FP32(x[i].d);                                                  \
        float dt[levels];                                                                           \
        for (int k = 0; k < levels; ++k) {                                                          \
            dt[k] = d*turbo##N##_c[k];                                                              \
        }                                                                                           \
        turbo##N##_lookup(x + i, dt, y + i*QK_TURBO);                                               \
    }                                                                                               \
}                                                                                                   \
TURBO_NOINLINE static void turbo##N##_dot_multi_scalar(const block_turbo##N##_0 * x, const float * y, int64_t ldy, \
                                                      int nq, int64_t nb, float * s) {              \
    float sum[TURBO_DOT_MULTI_MAX] = { 0.0f };                                                      \
    for (int64_t i = 0; i < nb; ++i) {                                                              \
        float c[QK_TURBO];                                                                          \
        turbo##N##_lookup(x + i, turbo##N##_c, c);                                                  \
        const float d = GGML_FP16_TO_FP32(x[i].d);                                                  \
        for (int h = 0; h < nq; ++h) {                                                              \
            sum[h] += d*turbo_dot64(c, y + h*ldy + i*QK_TURBO);                                     \
        }                                                                                           \
    }                                                                                               \
    for (int h = 0; h < nq; ++h) {                                                                  \
        s[h] = sum[h];                                                                              \
    }                                                                                               \
}                                                                                                   \
TURBO_NOINLINE static void turbo##N##_dot_scalar(const block_turbo##N##_0 * x, const float * y, int64_t nb, float * s) { \
    turbo##N##_dot_multi_scalar(x, y, 0, 1, nb, s);  /* one head: vec_dot_multi's sums, bit for bit */ \
}                                                                                                   \
static void turbo##N##_dot_multi(const block_turbo##N##_0 * x, const float * y, int64_t ldy, int nq, int64_t nb, float * s) { \
    switch (turbo_simd()) {                                                                         \
        TURBO_SIMD_DOT_MULTI(N)                                                                     \
        default: turbo##N##_dot_multi_scalar(x, y, ldy, nq, nb, s); return;                         \
    }                                                                                               \
}                                                                                                   \
TURBO_NOINLINE static void turbo##N##_dequantize_first(const void * vx, float * y, int64_t k) {    \
    (void) turbo_simd();                                                                            \
    dequantize_row_turbo##N##_0(vx, y, k);                                                          \
}                                                                                                   \
TURBO_NOINLINE static void turbo##N##_dot_first(int n, float * s, const void * vx, const void * vy) { \
    (void) turbo_simd();                                                                            \
    ggml_vec_dot_turbo##N##_0_f32(n, s, 0, vx, 0, vy, 0, 1);                                        \
}                                                                                                   \
void dequantize_row_turbo##N##_0(const void * GGML_RESTRICT vx, float * GGML_RESTRICT y, int64_t k) { \
    assert(k % QK_TURBO == 0);                                                                      \
    const block_turbo##N##_0 * x = (const block_turbo##N##_0 *) vx;                                 \
    const int64_t nb = k / QK_TURBO;                                                                \
    switch (TURBO_SIMD_LEVEL()) {                                                                   \
        TURBO_SIMD_DEQUANT(N)                                                                       \
        case 0:  turbo##N##_dequantize_scalar(x, y, nb); return;                                    \
        default: turbo##N##_dequantize_first(vx, y, k);  return;                                    \
    }                                                                                               \
}                                                                                                   \
void ggml_vec_dot_turbo##N##_0_f32(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, \
                                   size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc) { \
    (void) bs; (void) bx; (void) by;                                                                \
    assert(nrc == 1);                                                                               \
    (void) nrc;                                                                                     \
    assert(n % QK_TURBO == 0);                                                                      \
    const block_turbo##N##_0 * x = (const block_turbo##N##_0 *) vx;                                 \
    const int64_t nb = n / QK_TURBO;                                                                \
    switch (TURBO_SIMD_LEVEL()) {                                                                   \
        TURBO_SIMD_DOT(N)                                                                           \
        case 0:  turbo##N##_dot_scalar(x, (const float *) vy, nb, s); return;                       \
        default: turbo##N##_dot_first(n, s, vx, vy);                  return;                       \
    }                                                                                               \
}

TURBO_DEFINE_DECODE(4)
TURBO_DEFINE_DECODE(3)
TURBO_DEFINE_DECODE(2)

void ggml_turbo_vec_dot_multi(enum ggml_type type, int n, int nq, float * GGML_RESTRICT s, const void * GGML_RESTRICT vx,
                              const float * GGML_RESTRICT y, int64_t ldy) {
    assert(n % QK_TURBO == 0);
    const int64_t nb = n / QK_TURBO;
    for (int h0 = 0; h0 < nq; h0 += TURBO_DOT_MULTI_MAX) {  // the row is decoded once per group
        const int hn = nq - h0 < TURBO_DOT_MULTI_MAX ? nq - h0 : TURBO_DOT_MULTI_MAX;
        switch (type) {
            case GGML_TYPE_TURBO4_0: turbo4_dot_multi((const block_turbo4_0 *) vx, y + h0*ldy, ldy, hn, nb, s + h0); break;
            case GGML_TYPE_TURBO3_0: turbo3_dot_multi((const block_turbo3_0 *) vx, y + h0*ldy, ldy, hn, nb, s + h0); break;
            case GGML_TYPE_TURBO2_0: turbo2_dot_multi((const block_turbo2_0 *) vx, y + h0*ldy, ldy, hn, nb, s + h0); break;
            default: GGML_ABORT("ggml_turbo_vec_dot_multi: %s is not a turbo type", ggml_type_name(type));
        }
    }
}
