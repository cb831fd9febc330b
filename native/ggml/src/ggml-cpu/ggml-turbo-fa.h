// tqgguf: K/V tile packing for ggml's tiled CPU flash attention (ops.cpp,
// ggml_compute_forward_flash_attn_ext_tiled), so that quantized caches (turbo4/3/2, q8_0, ...)
// and mixed K/V types take the tiled path instead of the one-query-at-a-time loop.
//
// Why: the one-query loop decodes every K and V row once per query (vec_dot + to_float +
// vec_mad per key and query); in prefill that is n_tokens decodes of each cell per layer and
// head. The tiled path decodes a tile of KV_TILE rows once and shares it across its Q_TILE
// queries with two small F32 GEMMs (docs/CPU.md measures it). A decoded value is the same
// float the row decoders produce (d * c[idx] for the turbo types, ggml-turbo.c), so the
// codec is untouched; only the attention's summation order is that of the F16 tiled path.
//
// Included from ops.cpp only (C++; header-only so that ggml-cpu's source list is unchanged).
#pragma once

#include "ggml.h"
#include "ggml-impl.h"
#include "ggml-cpu.h"
#include "simd-mappings.h"

#include <cstring>

// True when the tiled path can pack rows of this type: F32, F16, or any type with a to_float
// row decoder whose block divides the row length n.
static inline bool ggml_turbo_fa_tile_type_ok(enum ggml_type type, int64_t n) {
    if (type == GGML_TYPE_F32 || type == GGML_TYPE_F16) {
        return true;
    }
    return ggml_get_type_traits(type)->to_float != nullptr && n % ggml_blck_size(type) == 0;
}

// Scratch floats ggml_turbo_fa_pack_k_row needs for a row of DK values (0 for F32/F16).
static inline int64_t ggml_turbo_fa_k_scratch(enum ggml_type type, int64_t DK) {
    return (type == GGML_TYPE_F32 || type == GGML_TYPE_F16) ? 0 : DK;
}

// Column tk of the transposed K tile: K_t[dk*ld + tk] = k_dk, dk = 0..DK-1, for one K row of
// `type` at k_data. scratch: ggml_turbo_fa_k_scratch(type, DK) floats (quantized types decode
// the row there first, with the type's own to_float).
static inline void ggml_turbo_fa_pack_k_row(enum ggml_type type, const void * k_data, int64_t DK,
                                            float * K_t, int64_t ld, float * scratch) {
    if (type == GGML_TYPE_F16) {
        const ggml_fp16_t * k16 = (const ggml_fp16_t *) k_data;
        for (int64_t dk = 0; dk < DK; dk++) {
            K_t[dk*ld] = GGML_CPU_FP16_TO_FP32(k16[dk]);
        }
        return;
    }
    const float * row = (const float *) k_data;
    if (type != GGML_TYPE_F32) {
        ggml_get_type_traits(type)->to_float(k_data, scratch, DK);
        row = scratch;
    }
    for (int64_t dk = 0; dk < DK; dk++) {
        K_t[dk*ld] = row[dk];
    }
}

// One V row of `type` at v_data as DV floats at dst (F16 through ggml's SIMD conversion,
// quantized types through their to_float).
static inline void ggml_turbo_fa_pack_v_row(enum ggml_type type, const void * v_data, int64_t DV, float * dst) {
    if (type == GGML_TYPE_F16) {
        ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) v_data, dst, DV);
    } else if (type == GGML_TYPE_F32) {
        memcpy(dst, v_data, DV*sizeof(float));
    } else {
        ggml_get_type_traits(type)->to_float(v_data, dst, DV);
    }
}
