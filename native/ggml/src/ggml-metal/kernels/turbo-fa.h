// tqgguf: the K/V types of the flash-attention kernel instances with a turbo cache
// (kernels/fa_turbo.metal: non-vec; kernels/fa_vec_turbo.metal: vec).
//
// The pairs are GGML_CUDA_TURBO_FA_PAIRS from ggml-cuda/turbo-pairs.h, the one list that the
// CUDA build and ggml-metal-turbo.h (supports_op) read too: every K/V combination of
// {f16, bf16, q8_0, q4_0, turbo4, turbo3, turbo2} with at least one turbo side. Head dims:
// 64, 128, 256 (DK == DV).
//
// Kernel names: kernel_flash_attn_ext[_vec]_<K>_<V>_dk<D>_dv<D>, <K>/<V> = ggml_type_name
// (ggml_metal_turbo_fa_kv_name in ggml-metal-turbo.h builds the same "<K>_<V>" on the host).
#pragma once

#include "ggml-cuda/turbo-pairs.h"

// kernel-name tag of each type (ggml_type_name), as a token
#define TQ_FA_TOK_F16      f16
#define TQ_FA_TOK_BF16     bf16
#define TQ_FA_TOK_Q8_0     q8_0
#define TQ_FA_TOK_Q4_0     q4_0
#define TQ_FA_TOK_TURBO4_0 turbo4
#define TQ_FA_TOK_TURBO3_0 turbo3
#define TQ_FA_TOK_TURBO2_0 turbo2

// <type in device memory, nl, dequantize> of the non-vec kernel (type4x4 forms) ...
#define TQ_FA_4X4_F16       half4x4,        1,          dequantize_f16
#define TQ_FA_4X4_BF16      bfloat4x4,      1,          dequantize_bf16
#define TQ_FA_4X4_Q8_0      block_q8_0,     2,          dequantize_q8_0
#define TQ_FA_4X4_Q4_0      block_q4_0,     2,          dequantize_q4_0
#define TQ_FA_4X4_TURBO4_0  block_turbo4_0, NL_TURBO,   dequantize_turbo4_0
#define TQ_FA_4X4_TURBO3_0  block_turbo3_0, NL_TURBO,   dequantize_turbo3_0
#define TQ_FA_4X4_TURBO2_0  block_turbo2_0, NL_TURBO,   dequantize_turbo2_0

// ... and of the vec kernel (type4 forms)
#define TQ_FA_T4_F16        half4,          1,          dequantize_f16_t4
#define TQ_FA_T4_BF16       bfloat4,        1,          dequantize_bf16_t4
#define TQ_FA_T4_Q8_0       block_q8_0,     8,          dequantize_q8_0_t4
#define TQ_FA_T4_Q4_0       block_q4_0,     8,          dequantize_q4_0_t4
#define TQ_FA_T4_TURBO4_0   block_turbo4_0, NL_TURBO_4, dequantize_turbo4_0_t4
#define TQ_FA_T4_TURBO3_0   block_turbo3_0, NL_TURBO_4, dequantize_turbo3_0_t4
#define TQ_FA_T4_TURBO2_0   block_turbo2_0, NL_TURBO_4, dequantize_turbo2_0_t4

// TQ_FA_IF_<type>(text): text where the type's kernels exist (bf16 only with bfloat support,
// which ggml_metal_turbo_fa_supported checks on the host as has_bfloat)
#define TQ_FA_IF_F16(...)      __VA_ARGS__
#define TQ_FA_IF_Q8_0(...)     __VA_ARGS__
#define TQ_FA_IF_Q4_0(...)     __VA_ARGS__
#define TQ_FA_IF_TURBO4_0(...) __VA_ARGS__
#define TQ_FA_IF_TURBO3_0(...) __VA_ARGS__
#define TQ_FA_IF_TURBO2_0(...) __VA_ARGS__
#if defined(GGML_METAL_HAS_BF16)
#define TQ_FA_IF_BF16(...)     __VA_ARGS__
#else
#define TQ_FA_IF_BF16(...)
#endif

// "PREFIX_<K>_<V>_dk<D>_dv<D>" as one string literal
#define TQ_FA_STR_(x) #x
#define TQ_FA_STR(x) TQ_FA_STR_(x)
#define TQ_FA_JOIN_(P, K, V, D) P##_##K##_##V##_dk##D##_dv##D
#define TQ_FA_JOIN(P, K, V, D) TQ_FA_JOIN_(P, K, V, D)
#define TQ_FA_KERNEL_NAME(P, K, V, D) TQ_FA_STR(TQ_FA_JOIN(P, TQ_FA_TOK_##K, TQ_FA_TOK_##V, D))
