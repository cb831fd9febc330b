// tqgguf: CPU codec of the turbo KV-cache types (implemented in ggml-turbo.c, part of ggml-base).
//
// Row functions take k values (k a multiple of QK_TURBO = 64). Two encoders share each format:
//   quantize_row_turboN_0_ref: TurboQuant reference - nearest centroids of x/||x||, scale
//                              d = ||x|| / ||c[idx]|| (norm-corrected, keeps the L2 norm).
//   quantize_row_turboN_0:     scale search - 16 candidate scales, least-squares d of the best
//                              (what the CPU KV cache writes; same decoder).
// vec_dot: s[0] = sum_j x_j * y_j with x a turbo row and y float32 (vec_dot_type = F32).
#pragma once

#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

// Whether type is one of the turbo KV-cache types (the one place the CPU backend names the three).
static inline bool ggml_turbo_type_is_turbo(enum ggml_type type) {
    return type == GGML_TYPE_TURBO4_0 || type == GGML_TYPE_TURBO3_0 || type == GGML_TYPE_TURBO2_0;
}

GGML_API void quantize_row_turbo4_0_ref(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k);
GGML_API void quantize_row_turbo3_0_ref(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k);
GGML_API void quantize_row_turbo2_0_ref(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k);

GGML_API void quantize_row_turbo4_0(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k);
GGML_API void quantize_row_turbo3_0(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k);
GGML_API void quantize_row_turbo2_0(const float * GGML_RESTRICT x, void * GGML_RESTRICT y, int64_t k);

GGML_API void dequantize_row_turbo4_0(const void * GGML_RESTRICT x, float * GGML_RESTRICT y, int64_t k);
GGML_API void dequantize_row_turbo3_0(const void * GGML_RESTRICT x, float * GGML_RESTRICT y, int64_t k);
GGML_API void dequantize_row_turbo2_0(const void * GGML_RESTRICT x, float * GGML_RESTRICT y, int64_t k);

GGML_API void ggml_vec_dot_turbo4_0_f32(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc);
GGML_API void ggml_vec_dot_turbo3_0_f32(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc);
GGML_API void ggml_vec_dot_turbo2_0_f32(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc);

// s[h] = vec_dot of the turbo row vx (n values, type a turbo type) with the float32 row
// y + h*ldy, for h = 0 .. nq-1: bit for bit what nq calls of ggml_vec_dot_turboN_0_f32 return,
// at every SIMD level, with each block of the row decoded once per 16 rows of y (flash
// attention's one-query decode: the Q heads that share a K head). Aborts on a non-turbo type.
GGML_API void ggml_turbo_vec_dot_multi(enum ggml_type type, int n, int nq, float * GGML_RESTRICT s, const void * GGML_RESTRICT vx,
                                       const float * GGML_RESTRICT y, int64_t ldy);
// ggml_quantize_chunk entry points (imatrix ignored; scale-search encoder).
GGML_API size_t quantize_turbo4_0(const float * GGML_RESTRICT src, void * GGML_RESTRICT dst, int64_t nrows, int64_t n_per_row, const float * imatrix);
GGML_API size_t quantize_turbo3_0(const float * GGML_RESTRICT src, void * GGML_RESTRICT dst, int64_t nrows, int64_t n_per_row, const float * imatrix);
GGML_API size_t quantize_turbo2_0(const float * GGML_RESTRICT src, void * GGML_RESTRICT dst, int64_t nrows, int64_t n_per_row, const float * imatrix);

// GGML_TYPE_COUNT of this build, so bindings can enumerate types by name without
// hard-coding enum values (ggml_type_name does not range-check).
GGML_API int ggml_type_count(void);

// SIMD level in use: 0 portable C, 1 AVX2+FMA+F16C, 2 AVX-512F decoders (dequantize_row, vec_dot).
// GGML_TURBO_NO_SIMD=1 forces 0; GGML_TURBO_SIMD_MAX=n caps the level at n.
GGML_API int ggml_turbo_simd_level(void);

#ifdef __cplusplus
}
#endif
