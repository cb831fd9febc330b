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
#endif

static const float turbo4_c[16] = GGML_TURBO4_CENTROIDS;
static const float turbo4_b[15] = GGML_TURBO4_BOUNDARIES;
static const float turbo3_c[8]  = GGML_TURBO3_CENTROIDS;
static const float turbo3_b[7]  = GGML_TURBO3_BOUNDARIES;
static const float turbo2_c[4]  = GGML_TURBO2_CENTROIDS;
static const float turbo2_b[3]  = GGML_TURBO2_BOUNDARIES;
static const float turbo_inv_grid[GGML_TURBO_SEARCH_STEPS] = GGML_TURBO_SEARCH_INV_GRID;

#define TURBO_FP16_MAX 65504.0f

typedef struct {
    const float * c;  // centroids, ascending
    const float * b;  // decision boundaries (midpoints), ascending
    int levels;
} turbo_codebook;

static const turbo_codebook turbo4_cb = { turbo4_c, turbo4_b, 16 };
static const turbo_codebook turbo3_cb = { turbo3_c, turbo3_b, 8 };
static const turbo_codebook turbo2_cb = { turbo2_c, turbo2_b, 4 };

int ggml_type_count(void) {
    return GGML_TYPE_COUNT;
}

// ---------------------------------------------------------------------------------------
// portable building blocks

// Canonical sum of 64 floats: acc[l] = sum_r p[8r + l] (r ascending), then
// ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)).
static inline float turbo_sum64(const float * p) {
    float acc[8] = { 0 };
    for (int r = 0; r < 8; ++r) {
        for (int l = 0; l < 8; ++l) {
            acc[l] += p[8*r + l];
        }
    }
    const float a0 = acc[0] + acc[4];
    const float a1 = acc[1] + acc[5];
    const float a2 = acc[2] + acc[6];
    const float a3 = acc[3] + acc[7];
    return (a0 + a2) + (a1 + a3);
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

static void turbo_pack_2bit(uint8_t * qs, const uint8_t * idx) {
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t) ((idx[j] & 3) | ((idx[j + 16] & 3) << 2) | ((idx[j + 32] & 3) << 4) | ((idx[j + 48] & 3) << 6));
    }
}

static void turbo3_pack(block_turbo3_0 * y, float d, const uint8_t * idx) {
    y->d = GGML_FP32_TO_FP16(d);
    turbo_pack_2bit(y->qs, idx);
    for (int i = 0; i < 8; ++i) {
        uint8_t h = 0;
        for (int b = 0; b < 8; ++b) {
            h |= (uint8_t) (((idx[8*i + b] >> 2) & 1) << b);
        }
        y->qh[i] = h;
    }
}

static void turbo2_pack(block_turbo2_0 * y, float d, const uint8_t * idx) {
    y->d = GGML_FP32_TO_FP16(d);
    turbo_pack_2bit(y->qs, idx);
}

static inline int turbo4_index(const block_turbo4_0 * x, int j) {
    return j < QK_TURBO/2 ? (x->qs[j] & 15) : (x->qs[j - QK_TURBO/2] >> 4);
}

static inline int turbo_index_2bit(const uint8_t * qs, int j) {
    return (qs[j % 16] >> (2*(j / 16))) & 3;
}

static inline int turbo3_index(const block_turbo3_0 * x, int j) {
    return turbo_index_2bit(x->qs, j) | (((x->qh[j / 8] >> (j % 8)) & 1) << 2);
}

// ---------------------------------------------------------------------------------------
// AVX2 paths (chosen at run time; same results as the scalar encoder, bit for bit)

#ifdef TURBO_HAVE_X86_DISPATCH

#define TURBO_AVX2 __attribute__((target("avx2,fma")))

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

TURBO_AVX2 static void turbo_load_tables(const turbo_codebook * cb, __m256 * lo, __m256 * hi) {
    float t[16];
    for (int i = 0; i < 16; ++i) {
        t[i] = cb->c[i % cb->levels];
    }
    *lo = _mm256_loadu_ps(t);
    *hi = _mm256_loadu_ps(t + 8);
}

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
    __m256 lo, hi;
    turbo_load_tables(cb, &lo, &hi);
    __m256 bnd[15];
    for (int i = 0; i < cb->levels - 1; ++i) {
        bnd[i] = _mm256_set1_ps(cb->b[i]);
    }
    int32_t cand[QK_TURBO], best[QK_TURBO] = { 0 };
    const int steps = search ? GGML_TURBO_SEARCH_STEPS : 1;
    float best_score = -1.0f, best_dot = 0.0f, best_den = 1.0f;
    for (int k = 0; k < steps; ++k) {
        const __m256 s = _mm256_set1_ps(search ? inv*turbo_inv_grid[k] : inv);
        __m256 acc_dot = _mm256_setzero_ps();
        __m256 acc_den = _mm256_setzero_ps();
        for (int r = 0; r < 8; ++r) {
            const __m256 v = _mm256_mul_ps(xv[r], s);
            __m256i q = _mm256_setzero_si256();
            for (int i = 0; i < cb->levels - 1; ++i) {
                q = _mm256_sub_epi32(q, _mm256_castps_si256(_mm256_cmp_ps(v, bnd[i], _CMP_GT_OQ)));
            }
            _mm256_storeu_si256((__m256i *) (cand + 8*r), q);
            const __m256 c = turbo_lookup(q, lo, hi, cb->levels);
            acc_dot = _mm256_add_ps(acc_dot, _mm256_mul_ps(xv[r], c));
            acc_den = _mm256_add_ps(acc_den, _mm256_mul_ps(c, c));
        }
        const float dot = turbo_hsum8_canonical(acc_dot);
        const float den = turbo_hsum8_canonical(acc_den);
        if (!search) {
            memcpy(best, cand, sizeof(cand));
            best_dot = n;
            best_den = sqrtf(den);
            break;
        }
        const float score = dot*dot/den;
        if (score > best_score) {
            best_score = score;
            best_dot   = dot;
            best_den   = den;
            memcpy(best, cand, sizeof(cand));
        }
    }
    for (int j = 0; j < QK_TURBO; ++j) {
        idx[j] = (uint8_t) best[j];
    }
    *d_out = turbo_clamp_scale(best_dot/best_den);
}

// 8 indices of elements j0..j0+7 (j0 a multiple of 8) as int32 lanes
TURBO_AVX2 static inline __m256i turbo_idx8_2bit(const uint8_t * qs, int j0) {
    int64_t raw;
    memcpy(&raw, qs + (j0 % 16), 8);
    const __m256i b = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(raw));
    return _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_set1_epi32(2*(j0 / 16))), _mm256_set1_epi32(3));
}

TURBO_AVX2 static inline __m256i turbo3_idx8(const block_turbo3_0 * x, int j0) {
    const __m256i lo = turbo_idx8_2bit(x->qs, j0);
    const __m256i h  = _mm256_set1_epi32(x->qh[j0 / 8]);
    const __m256i hb = _mm256_and_si256(_mm256_srlv_epi32(h, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), _mm256_set1_epi32(1));
    return _mm256_or_si256(lo, _mm256_slli_epi32(hb, 2));
}

// decode 64 values of one block into out[0..63] (already scaled by d)
TURBO_AVX2 static inline void turbo_decode_block_avx2(enum ggml_type type, const void * blk, __m256 lo, __m256 hi, __m256 out[8]) {
    switch (type) {
        case GGML_TYPE_TURBO4_0: {
            const block_turbo4_0 * x = (const block_turbo4_0 *) blk;
            const __m256 d = _mm256_set1_ps(GGML_FP16_TO_FP32(x->d));
            for (int r = 0; r < 4; ++r) {
                int64_t raw;
                memcpy(&raw, x->qs + 8*r, 8);
                const __m256i b = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(raw));
                out[r]     = _mm256_mul_ps(d, turbo_lookup(_mm256_and_si256(b, _mm256_set1_epi32(15)), lo, hi, 16));
                out[r + 4] = _mm256_mul_ps(d, turbo_lookup(_mm256_srli_epi32(b, 4), lo, hi, 16));
            }
        } break;
        case GGML_TYPE_TURBO3_0: {
            const block_turbo3_0 * x = (const block_turbo3_0 *) blk;
            const __m256 d = _mm256_set1_ps(GGML_FP16_TO_FP32(x->d));
            for (int r = 0; r < 8; ++r) {
                out[r] = _mm256_mul_ps(d, turbo_lookup(turbo3_idx8(x, 8*r), lo, hi, 8));
            }
        } break;
        default: {
            const block_turbo2_0 * x = (const block_turbo2_0 *) blk;
            const __m256 d = _mm256_set1_ps(GGML_FP16_TO_FP32(x->d));
            for (int r = 0; r < 8; ++r) {
                out[r] = _mm256_mul_ps(d, turbo_lookup(turbo_idx8_2bit(x->qs, 8*r), lo, hi, 4));
            }
        } break;
    }
}

TURBO_AVX2 static void turbo_dequantize_avx2(enum ggml_type type, const turbo_codebook * cb, size_t bsize,
                                             const void * vx, float * y, int64_t nb) {
    __m256 lo, hi, out[8];
    turbo_load_tables(cb, &lo, &hi);
    for (int64_t i = 0; i < nb; ++i) {
        turbo_decode_block_avx2(type, (const char *) vx + i*bsize, lo, hi, out);
        for (int r = 0; r < 8; ++r) {
            _mm256_storeu_ps(y + i*QK_TURBO + 8*r, out[r]);
        }
    }
}

TURBO_AVX2 static float turbo_dot_avx2(enum ggml_type type, const turbo_codebook * cb, size_t bsize,
                                       const void * vx, const float * y, int64_t nb) {
    __m256 lo, hi, out[8];
    turbo_load_tables(cb, &lo, &hi);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        turbo_decode_block_avx2(type, (const char *) vx + i*bsize, lo, hi, out);
        const float * yb = y + i*QK_TURBO;
        for (int r = 0; r < 8; r += 2) {
            acc0 = _mm256_fmadd_ps(out[r],     _mm256_loadu_ps(yb + 8*r),     acc0);
            acc1 = _mm256_fmadd_ps(out[r + 1], _mm256_loadu_ps(yb + 8*r + 8), acc1);
        }
    }
    return turbo_hsum8_canonical(_mm256_add_ps(acc0, acc1));
}

static int turbo_use_avx2(void) {
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 1 : 0;
        const char * env = getenv("GGML_TURBO_NO_SIMD");
        if (env && atoi(env)) {
            cached = 0;
        }
    }
    return cached;
}
#else
static int turbo_use_avx2(void) { return 0; }
#endif // TURBO_HAVE_X86_DISPATCH

int ggml_turbo_simd_level(void) {
    return turbo_use_avx2();
}

// ---------------------------------------------------------------------------------------
// row functions

static void turbo_encode_block(const turbo_codebook * cb, const float * x, int search, float * d, uint8_t * idx) {
#ifdef TURBO_HAVE_X86_DISPATCH
    if (turbo_use_avx2()) {
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

#ifdef TURBO_HAVE_X86_DISPATCH
#define TURBO_SIMD_DEQUANT(N)                                                                       \
    if (turbo_use_avx2()) {                                                                         \
        turbo_dequantize_avx2(GGML_TYPE_TURBO##N##_0, &turbo##N##_cb, sizeof(block_turbo##N##_0), vx, y, nb); \
        return;                                                                                     \
    }
#define TURBO_SIMD_DOT(N)                                                                           \
    if (turbo_use_avx2()) {                                                                         \
        *s = turbo_dot_avx2(GGML_TYPE_TURBO##N##_0, &turbo##N##_cb, sizeof(block_turbo##N##_0), vx, (const float *) vy, nb); \
        return;                                                                                     \
    }
#else
#define TURBO_SIMD_DEQUANT(N)
#define TURBO_SIMD_DOT(N)
#endif

#define TURBO_DEFINE_DECODE(N)                                                                      \
void dequantize_row_turbo##N##_0(const void * GGML_RESTRICT vx, float * GGML_RESTRICT y, int64_t k) { \
    assert(k % QK_TURBO == 0);                                                                      \
    const int64_t nb = k / QK_TURBO;                                                                \
    TURBO_SIMD_DEQUANT(N)                                                                           \
    const block_turbo##N##_0 * x = (const block_turbo##N##_0 *) vx;                                 \
    for (int64_t i = 0; i < nb; ++i) {                                                              \
        const float d = GGML_FP16_TO_FP32(x[i].d);                                                  \
        for (int j = 0; j < QK_TURBO; ++j) {                                                        \
            y[i*QK_TURBO + j] = d*turbo##N##_c[turbo##N##_index(x + i, j)];                         \
        }                                                                                           \
    }                                                                                               \
}                                                                                                   \
void ggml_vec_dot_turbo##N##_0_f32(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, \
                                   size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc) { \
    (void) bs; (void) bx; (void) by;                                                                \
    assert(nrc == 1);                                                                               \
    (void) nrc;                                                                                     \
    assert(n % QK_TURBO == 0);                                                                      \
    const int64_t nb = n / QK_TURBO;                                                                \
    TURBO_SIMD_DOT(N)                                                                               \
    const block_turbo##N##_0 * x = (const block_turbo##N##_0 *) vx;                                 \
    const float * yf = (const float *) vy;                                                          \
    float sum = 0.0f;                                                                               \
    for (int64_t i = 0; i < nb; ++i) {                                                              \
        float sb = 0.0f;                                                                            \
        for (int j = 0; j < QK_TURBO; ++j) {                                                        \
            sb += turbo##N##_c[turbo##N##_index(x + i, j)]*yf[i*QK_TURBO + j];                      \
        }                                                                                           \
        sum += GGML_FP16_TO_FP32(x[i].d)*sb;                                                        \
    }                                                                                               \
    *s = sum;                                                                                       \
}

static inline int turbo2_index(const block_turbo2_0 * x, int j) {
    return turbo_index_2bit(x->qs, j);
}

TURBO_DEFINE_DECODE(4)
TURBO_DEFINE_DECODE(3)
TURBO_DEFINE_DECODE(2)
