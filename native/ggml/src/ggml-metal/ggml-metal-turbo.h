// tqgguf: host-side facts of the Metal turbo kernels: which flash-attention K/V pairs have
// kernels, and the kernel names. Included (patch 0010) from ggml-metal-device.m (supports_op),
// ggml-metal-device.cpp (pipeline names), ggml-metal-ops.cpp (kernel configuration) and
// ggml-metal.cpp (the backend feature TURBO_FA).
//
// Kernels: kernels/turbo-dequantize.h, turbo-quantize.h (codec), the get_rows / cpy / set_rows
// instances in kernels/quantize.metal, kernels/fa_turbo.metal and fa_vec_turbo.metal (flash
// attention, pairs from ggml-cuda/turbo-pairs.h through kernels/turbo-fa.h).
#pragma once

#include "ggml.h"
#include "../ggml-cuda/turbo-pairs.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

static inline bool ggml_metal_type_is_turbo(enum ggml_type type) {
    return type == GGML_TYPE_TURBO4_0 || type == GGML_TYPE_TURBO3_0 || type == GGML_TYPE_TURBO2_0;
}

// FLASH_ATTN_EXT with a turbo K or V cache: true exactly when fa_turbo.metal / fa_vec_turbo.metal
// instantiate it: the K/V pair is in GGML_CUDA_TURBO_FA_PAIRS, the head dim is 64, 128 or 256
// (K, V and Q alike), and a bf16 side only where the device has bfloat.
static inline bool ggml_metal_turbo_fa_supported(const struct ggml_tensor * op, bool has_bfloat) {
    const enum ggml_type tk = op->src[1]->type;
    const enum ggml_type tv = op->src[2]->type;
    const int64_t d = op->src[1]->ne[0];
    if (op->src[0]->ne[0] != d || op->src[2]->ne[0] != d || (d != 64 && d != 128 && d != 256)) {
        return false;
    }
    if ((tk == GGML_TYPE_BF16 || tv == GGML_TYPE_BF16) && !has_bfloat) {
        return false;
    }
#define GGML_METAL_TURBO_FA_PAIR(K, V) if (tk == GGML_TYPE_##K && tv == GGML_TYPE_##V) { return true; }
    GGML_CUDA_TURBO_FA_PAIRS(GGML_METAL_TURBO_FA_PAIR)
#undef GGML_METAL_TURBO_FA_PAIR
    return false;
}

// The <type> part of the flash-attention kernel names (kernel_flash_attn_ext[_vec]_<type>_dk.._dv..):
// "<K>_<V>" (ggml type names) when K or V is turbo, as kernels/turbo-fa.h names the instances;
// otherwise upstream's ggml_type_name(K). buf holds the joined name (size >= 32).
static inline const char * ggml_metal_turbo_fa_kv_name(const struct ggml_tensor * op, char * buf, size_t size) {
    const enum ggml_type tk = op->src[1]->type;
    const enum ggml_type tv = op->src[2]->type;
    if (!ggml_metal_type_is_turbo(tk) && !ggml_metal_type_is_turbo(tv)) {
        return ggml_type_name(tk);
    }
    snprintf(buf, size, "%s_%s", ggml_type_name(tk), ggml_type_name(tv));
    return buf;
}
