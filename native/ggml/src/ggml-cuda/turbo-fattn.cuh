// tqgguf: the flash-attention vector-kernel instances for turbo KV caches.
//
// Included at the end of fattn-vec.cuh. The pairs are every K/V combination of
// {f16, bf16, q8_0, q4_0, turbo4, turbo3, turbo2} with at least one turbo side, for head
// dims 64, 128 and 256 (the list: turbo-pairs.h); turbo.cmake compiles one translation unit
// per pair (always, not subject to GGML_CUDA_FA_QUANTS), and fattn.cu's vector-case table
// picks them up through GGML_CUDA_TURBO_FATTN_VEC_CASES. Other pairs (q4_1, q5_0, q5_1 with
// turbo) take upstream's documented path: K and V converted to f16, with a warning in the log.
#pragma once

#include "turbo-pairs.h"

#define GGML_CUDA_TURBO_EXTERN_DECL(K, V)                             \
    extern DECL_FATTN_VEC_CASE( 64, GGML_TYPE_##K, GGML_TYPE_##V);    \
    extern DECL_FATTN_VEC_CASE(128, GGML_TYPE_##K, GGML_TYPE_##V);    \
    extern DECL_FATTN_VEC_CASE(256, GGML_TYPE_##K, GGML_TYPE_##V);

GGML_CUDA_TURBO_FA_PAIRS(GGML_CUDA_TURBO_EXTERN_DECL)

// fattn.cu's FATTN_VEC_CASE tests GGML_CUDA_FA_<K>_<V>: the turbo pairs are always compiled
#define GGML_CUDA_TURBO_FA_DEFINED(K, V) static constexpr bool GGML_CUDA_FA_##K##_##V = true;
GGML_CUDA_TURBO_FA_PAIRS(GGML_CUDA_TURBO_FA_DEFINED)

// for ggml_cuda_get_fattn_vec_case (fattn.cu), after FATTN_VEC_CASES_ALL_D is defined
#define GGML_CUDA_TURBO_FATTN_VEC_CASE(K, V) FATTN_VEC_CASES_ALL_D(K, V)
#define GGML_CUDA_TURBO_FATTN_VEC_CASES GGML_CUDA_TURBO_FA_PAIRS(GGML_CUDA_TURBO_FATTN_VEC_CASE)
