// tqgguf: flash attention (non-vec kernel, batches of queries) with a turbo K and/or V cache:
// one instance per K/V pair of turbo-fa.h and head dim 64/128/256. The kernel template is
// upstream's (fa_common.metal); the turbo blocks reach it through dequantize_turboN_0 (nl = 4).
#include "common.h"
#include "dequantize.h"
#include "fa_common.metal"
#include "turbo-fa.h"

// as fa_q8_0.metal: K and V dequantized to half in shared memory, float accumulation
#define FA_TYPES \
    half,   half4,     simdgroup_half8x8,  \
    half,   half4x4,   simdgroup_half8x8,  \
    half,   half4x4,   simdgroup_half8x8,  \
    float,             simdgroup_float8x8, \
    float,  float2,    simdgroup_float8x8, \
    float,  float4,    simdgroup_float8x8

typedef decltype(kernel_flash_attn_ext<FA_TYPES, half4x4, 1, dequantize_f16, half4x4, 1, dequantize_f16, 64, 64>) flash_attn_ext_t;

#define TQ_FA_INSTANCE(K, V, D) \
    template [[host_name(TQ_FA_KERNEL_NAME(kernel_flash_attn_ext, K, V, D))]] kernel flash_attn_ext_t \
        kernel_flash_attn_ext<FA_TYPES, TQ_FA_4X4_##K, TQ_FA_4X4_##V, D, D>;

#define TQ_FA_PAIR(K, V) \
    TQ_FA_IF_##K(TQ_FA_IF_##V(TQ_FA_INSTANCE(K, V, 64) TQ_FA_INSTANCE(K, V, 128) TQ_FA_INSTANCE(K, V, 256)))

GGML_CUDA_TURBO_FA_PAIRS(TQ_FA_PAIR)

#undef TQ_FA_PAIR
#undef TQ_FA_INSTANCE
#undef FA_TYPES
