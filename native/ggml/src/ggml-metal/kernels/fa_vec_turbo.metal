// tqgguf: flash attention (vec kernel, few queries: token generation) with a turbo K and/or V
// cache: one instance per K/V pair of turbo-fa.h and head dim 64/128/256, each with upstream's
// baseline configuration (one query per simdgroup, NE = ggml_metal_tuning::fa_vec_baseline_ne:
// 2 for 64, 1 for 128 and 256); the host picks that configuration for every turbo pair
// (patch 0010, ggml-metal-ops.cpp). The turbo blocks reach upstream's template
// (fa_vec_common.metal) through dequantize_turboN_0_t4 (nl = 16).
#include "common.h"
#include "dequantize.h"
#include "fa_vec_common.metal"
#include "turbo-fa.h"

// as fa_vec_q8_0.metal
#define FA_TYPES \
           half4,  \
           half4,  \
           half4,  \
    float,         \
    float, float4, \
           float4

typedef decltype(kernel_flash_attn_ext_vec<FA_TYPES, half4, 1, dequantize_f16_t4, half4, 1, dequantize_f16_t4, 128, 128, 4>) flash_attn_ext_vec_t;

#define TQ_FA_VEC_NE_64  2
#define TQ_FA_VEC_NE_128 1
#define TQ_FA_VEC_NE_256 1

#define TQ_FA_VEC_INSTANCE(K, V, D) \
    template [[host_name(TQ_FA_KERNEL_NAME(kernel_flash_attn_ext_vec, K, V, D))]] kernel flash_attn_ext_vec_t \
        kernel_flash_attn_ext_vec<FA_TYPES, TQ_FA_T4_##K, TQ_FA_T4_##V, D, D, TQ_FA_VEC_NE_##D>;

#define TQ_FA_VEC_PAIR(K, V) \
    TQ_FA_IF_##K(TQ_FA_IF_##V(TQ_FA_VEC_INSTANCE(K, V, 64) TQ_FA_VEC_INSTANCE(K, V, 128) TQ_FA_VEC_INSTANCE(K, V, 256)))

GGML_CUDA_TURBO_FA_PAIRS(TQ_FA_VEC_PAIR)

#undef TQ_FA_VEC_PAIR
#undef TQ_FA_VEC_INSTANCE
#undef TQ_FA_VEC_NE_64
#undef TQ_FA_VEC_NE_128
#undef TQ_FA_VEC_NE_256
#undef FA_TYPES
