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

// ---------------------------------------------------------------------------------------------
// Decode with a quantized K or V, query by query: the Q heads that share a K/V head take each K and V row
// together. Two places in ops.cpp call it: the split-KV path (one query, n_kv >= 512, the cells split over the
// threads, each chunk's partials merged by ggml) and ggml_turbo_fa_decode_rows (one query below 512 cells, or
// a batch of fewer than 64: each thread's share of the (query, Q head) pairs over every cell, written to dst as
// ggml's per-query loop writes them; no split, so that a query alone and in a batch sum in the same order).
//
// Why: ggml's loop (ggml_compute_forward_flash_attn_ext_f16_one_chunk) runs the chunk once per
// Q head, so with GQA every K row is decoded and dotted once per Q head (vec_dot) and every V
// row decoded once per Q head (to_float): 3 times per row for SmolLM2-135M (9 Q / 3 KV heads),
// 7 times for Qwen2.5-0.5B (14 / 2). Here a turbo K row is decoded once for its G heads
// (ggml_turbo_vec_dot_multi) and a quantized V row once (to_float). The softmax then runs one of two
// ways (GGML_TURBO_FA_GROUPED below):
//   block (the default): the scores of GGML_TURBO_FA_DEC_BLOCK rows for each head first, then one
//     running-max update per head and block and the block's weights by ggml_vec_soft_max_f32 (ggml's
//     SIMD exp, as its soft_max op and the tiled path use): per row and head no scalar expf and no
//     branch on a new maximum. The same quantities in another order and through another exp: the
//     digits differ from ggml's loop within float rounding (tests/test_cpu_decode.py bounds it);
//   exact: each head's online softmax step exactly as ggml's loop (expf per row, the accumulator
//     rescaled at every new maximum): the same floats in the same order, so the partials (M, S, VKQ
//     per head and chunk) are bit for bit those of the loop it replaces.
//
// Returns false, having written nothing, where it does not apply (ggml_turbo_fa_decode_applies): K and
// V both F16/F32 (ggml's own loop, unchanged), K and V with different head counts, more than
// GGML_TURBO_FA_DEC_MAX_G Q heads per K/V head, or more scratch than GGML_TURBO_FA_DEC_SCRATCH floats.
#include "ggml-turbo.h"
#include "vec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>

static constexpr int64_t GGML_TURBO_FA_DEC_SCRATCH = 16384;  // floats on the stack (64 KiB)
static constexpr int64_t GGML_TURBO_FA_DEC_MAX_G     = 64;     // Q heads per K/V head
static constexpr int64_t GGML_TURBO_FA_DEC_BLOCK     = 16;     // rows per softmax block (one AVX-512 vector of scores)

// GGML_TURBO_FA_GROUPED (env, read once): 1 (or unset) on, block softmax; exact: on, each row's
// softmax step as ggml's loop (bit for bit its partials: tests/test_cpu_decode.py); 0 turns this path
// off (ggml's per-head loop, for A/B runs); log: on (block) and says on stderr, once per process, that
// it ran and for which types; another value: a warning, then on
enum { GGML_TURBO_FA_GROUPED_OFF, GGML_TURBO_FA_GROUPED_BLOCK, GGML_TURBO_FA_GROUPED_LOG, GGML_TURBO_FA_GROUPED_EXACT };
static inline int ggml_turbo_fa_grouped_mode() {
    static const int mode = [] {
        const char * e = getenv("GGML_TURBO_FA_GROUPED");
        if (e == nullptr || *e == '\0' || strcmp(e, "1") == 0) {
            return (int) GGML_TURBO_FA_GROUPED_BLOCK;
        }
        if (strcmp(e, "0") == 0) {
            return (int) GGML_TURBO_FA_GROUPED_OFF;
        }
        if (strcmp(e, "log") == 0) {
            return (int) GGML_TURBO_FA_GROUPED_LOG;
        }
        if (strcmp(e, "exact") == 0) {
            return (int) GGML_TURBO_FA_GROUPED_EXACT;
        }
        fprintf(stderr, "ggml_turbo_fa: GGML_TURBO_FA_GROUPED=%s is not one of 0, 1, log, exact; using 1\n", e);
        return (int) GGML_TURBO_FA_GROUPED_BLOCK;
    }();
    return mode;
}

// Where ggml's F16 dot product accumulates in F32 vectors loaded by converting F16 (x86: SSE3, AVX,
// AVX-512, GGML_F16_DOT_VEC is an F32 vector), the Q rows can be held as F32 once per chunk: each
// value is the F16 value exactly, as GGML_F16_DOT_VEC_LOAD would convert it every time.
#if defined(GGML_SIMD) && (defined(__SSE3__) || defined(__AVX__) || defined(__AVX512F__))
#define GGML_TURBO_FA_F16_DOT_F32_Q 1
#else
#define GGML_TURBO_FA_F16_DOT_F32_Q 0
#endif

// s[j] = ggml_vec_dot_f16(n, x, yh + j*ldh) for j < G (x: one F16 K row of n values; yh: G rows of
// Q as F16, ldh halves apart; yf: the same values as F32, ldf floats apart, used where
// GGML_TURBO_FA_F16_DOT_F32_Q), with each step's K vectors loaded and converted once for the G
// heads. Each head runs ggml_vec_dot_f16's own sequence (vec.cpp: GGML_F16_DOT_ARR accumulators,
// the same FMAs in the same order, GGML_F16_DOT_VEC_REDUCE, the scalar leftovers in ggml_float),
// so every s[j] is bit for bit its value; elsewhere ggml_vec_dot_f16 is called per head.
// G <= GGML_TURBO_FA_DEC_MAX_G.
static inline void ggml_turbo_fa_dot_f16_multi(int n, int G, float * s, const ggml_fp16_t * x,
                                               const ggml_fp16_t * yh, int64_t ldh, const float * yf, int64_t ldf) {
#if GGML_TURBO_FA_F16_DOT_F32_Q
    GGML_UNUSED(yh);
    GGML_UNUSED(ldh);
    const int np = (n & ~(GGML_F16_DOT_STEP - 1));
    GGML_F16_DOT_VEC sum[GGML_TURBO_FA_DEC_MAX_G][GGML_F16_DOT_ARR];
    for (int j = 0; j < G; ++j) {
        for (int a = 0; a < GGML_F16_DOT_ARR; ++a) {
            sum[j][a] = GGML_F16_DOT_VEC_ZERO;
        }
    }
    for (int i = 0; i < np; i += GGML_F16_DOT_STEP) {
        GGML_F16_DOT_VEC ax[GGML_F16_DOT_ARR];
        for (int a = 0; a < GGML_F16_DOT_ARR; ++a) {
            ax[a] = GGML_F16_DOT_VEC_LOAD(x + i + a*GGML_F16_DOT_EPR, a);
        }
        for (int j = 0; j < G; ++j) {
            const float * yj = yf + j*ldf;
            for (int a = 0; a < GGML_F16_DOT_ARR; ++a) {
                sum[j][a] = GGML_F16_DOT_VEC_FMA(sum[j][a], ax[a], GGML_F32_VEC_LOAD(yj + i + a*GGML_F16_DOT_EPR));
            }
        }
    }
    for (int j = 0; j < G; ++j) {
        ggml_float sumf = 0.0;
        GGML_F16_DOT_VEC_REDUCE(sumf, sum[j]);
        const float * yj = yf + j*ldf;
        for (int i = np; i < n; ++i) {
            sumf += (ggml_float)(GGML_CPU_FP16_TO_FP32(x[i])*yj[i]);
        }
        s[j] = sumf;
    }
#else
    GGML_UNUSED(yf);
    GGML_UNUSED(ldf);
    for (int j = 0; j < G; ++j) {
        ggml_vec_dot_f16(n, s + j, 0, (ggml_fp16_t *) x, 0, (ggml_fp16_t *) (yh + j*ldh), 0, 1);
    }
#endif
}

// y[h[a]*ldy + i] += x[i]*v[a] for the na heads listed in h (i < n): ggml_vec_mad_f32 for each of
// them, with each vector of x (one decoded V row) loaded once for all. The update of an element is
// the one vec.h makes (GGML_F32_VEC_FMA(y, x, v), one rounding), so every accumulator is bit for bit
// what the per-head calls give; where vec.h has a loop of its own (SVE, RISC-V V), no SIMD, or n is
// not a multiple of GGML_F32_STEP (vec.h's scalar leftovers), it is called per head.
static inline void ggml_turbo_fa_mad_f32_multi(int n, float * y, int64_t ldy, const float * x, const float * v,
                                               const int * h, int na) {
#if defined(GGML_SIMD) && !defined(__ARM_FEATURE_SVE) && !defined(__riscv_v_intrinsic)
    if (n % GGML_F32_STEP == 0) {
        for (int i = 0; i < n; i += GGML_F32_EPR) {
            const GGML_F32_VEC ax = GGML_F32_VEC_LOAD(x + i);
            for (int a = 0; a < na; ++a) {
                float * yi = y + h[a]*ldy + i;
                GGML_F32_VEC_STORE(yi, GGML_F32_VEC_FMA(GGML_F32_VEC_LOAD(yi), ax, GGML_F32_VEC_SET1(v[a])));
            }
        }
        return;
    }
#endif
    for (int a = 0; a < na; ++a) {
        ggml_vec_mad_f32(n, y + h[a]*ldy, x, v[a]);
    }
}

// Whether K or V is quantized (neither F16 nor F32): the pairs whose one-query decode runs
// ggml_turbo_fa_decode_chunk, and whose split-KV decode (512 cells or more) shares out only the cells the mask leaves
// visible (ggml_turbo_fa_visible_cells; with GGML_TURBO_FA_GROUPED=0 ggml's per-head loop runs in the same chunks,
// so the A/B and the bit-exact check of tests/test_cpu_decode.py compare the same partials). f16/f16 keeps ggml's
// split. Below 512 cells there is no split: there it (FA alone, SmolLM2's heads, 256 cells 63 -> 41 us) summed a
// one-token decode in another order than speculative decoding's batched verification, whose greedy text then differed
// from plain decoding's on a short chat (tests/test_serve_media.py; docs/CPU.md, session 27); the Q heads are shared
// out instead, every cell in ggml's order.
static inline bool ggml_turbo_fa_kv_quantized(const ggml_tensor * k, const ggml_tensor * v) {
    const bool k_plain = k->type == GGML_TYPE_F16 || k->type == GGML_TYPE_F32;
    const bool v_plain = v->type == GGML_TYPE_F16 || v->type == GGML_TYPE_F32;
    return !(k_plain && v_plain);
}

// The cells [0, n) a one-query decode's split covers: one past the last cell that some head's mask row (row 0
// of each of the F16 mask's ne[2] planes) does not hide (-inf), at least 1; every cell without a mask. A cache
// is padded to a multiple of 256 cells and fills from cell 0, so up to 255 of the last cells are hidden: split
// over all of them, the last thread got fewer visible cells than the others (none, for 600 visible of 768 on
// three threads).
static inline int64_t ggml_turbo_fa_visible_cells(const ggml_tensor * dst) {
    const ggml_tensor * k    = dst->src[1];
    const ggml_tensor * mask = dst->src[3];
    const int64_t n_kv = k->ne[1];
    if (mask == nullptr || mask->type != GGML_TYPE_F16) {
        return n_kv;
    }
    const uint16_t neg_inf = 0xFC00;  // binary16 -inf
    int64_t n = 1;
    for (int64_t p = 0; p < mask->ne[2]; ++p) {
        const uint16_t * m = (const uint16_t *) ((const char *) mask->data + p*mask->nb[2]);
        int64_t c = n_kv;
        while (c > n && m[c - 1] == neg_inf) {
            --c;
        }
        n = c > n ? c : n;
    }
    return n;
}

// F16 K whose vec_dot is ggml_vec_dot_f16 on F16 Q: its rows loaded once for the G heads (ggml_turbo_fa_dot_f16_multi)
static inline bool ggml_turbo_fa_k_f16_rows(const ggml_tensor * k) {
    const ggml_type_traits_cpu * t = ggml_get_type_traits_cpu(k->type);
    return k->type == GGML_TYPE_F16 && t->vec_dot == (ggml_vec_dot_t) ggml_vec_dot_f16 && t->vec_dot_type == GGML_TYPE_F16;
}

// Whether ggml_turbo_fa_decode_chunk takes this FLASH_ATTN_EXT node (dst): K or V quantized, K and V with the
// same head count dividing Q's and the same stream count (ne[3]) dividing Q's, at most GGML_TURBO_FA_DEC_MAX_G Q
// heads per K/V head, its scratch (G x (DK + DV) + DV floats, G x DK more for an F16 K) within
// GGML_TURBO_FA_DEC_SCRATCH, and GGML_TURBO_FA_GROUPED not 0.
static inline bool ggml_turbo_fa_decode_applies(const ggml_tensor * dst) {
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    const int64_t n_head = q->ne[2], n_head_kv = k->ne[2];
    if (!ggml_turbo_fa_kv_quantized(k, v) || v->ne[2] != n_head_kv || n_head % n_head_kv != 0 ||
        v->ne[3] != k->ne[3] || q->ne[3] % k->ne[3] != 0 || ggml_turbo_fa_grouped_mode() == GGML_TURBO_FA_GROUPED_OFF) {
        return false;
    }
    const int64_t G = n_head / n_head_kv, DK = k->ne[0], DV = v->ne[0];
    return G <= GGML_TURBO_FA_DEC_MAX_G &&
           G*(DK + DV) + DV + (ggml_turbo_fa_k_f16_rows(k) ? G*DK : 0) <= GGML_TURBO_FA_DEC_SCRATCH;
}

// dst: the FLASH_ATTN_EXT node (q F32); query iq1 of stream iq3 (q's dims 1 and 3: a multi-stream cache keeps each
// sequence's cells apart, ggml's broadcast iq3 / (neq3 / nek3) picks its K/V); its Q heads [h0, h1); rows
// [ic_start, ic_end) of K/V.
// partials: this chunk's slot of head 0, head h at partials + h*partial_stride ([M, S, VKQ[DV]]), for the split-KV
// path to merge (one query); nullptr: [ic_start, ic_end) is every cell, and each head's output, VKQ/S, goes to its
// row of dst as ggml's loop writes it.
static bool ggml_turbo_fa_decode_chunk(const ggml_tensor * dst, int64_t iq1, int64_t iq3, int64_t h0, int64_t h1,
                                       int64_t ic_start, int64_t ic_end, float * partials, int64_t partial_stride) {
    const ggml_tensor * q     = dst->src[0];
    const ggml_tensor * k     = dst->src[1];
    const ggml_tensor * v     = dst->src[2];
    const ggml_tensor * mask  = dst->src[3];
    const ggml_tensor * sinks = dst->src[4];

    if (h0 >= h1 || !ggml_turbo_fa_decode_applies(dst)) {
        return false;
    }
    const int64_t DK = k->ne[0], DV = v->ne[0];
    const int64_t n_head = q->ne[2], n_head_kv = k->ne[2];
    const int  mode  = ggml_turbo_fa_grouped_mode();
    const bool exact = mode == GGML_TURBO_FA_GROUPED_EXACT;
    const int64_t Gk = n_head / n_head_kv;  // Q heads per K/V head
    const ggml_type         k_vec_dot_type = ggml_get_type_traits_cpu(k->type)->vec_dot_type;
    const ggml_from_float_t q_to_vec_dot   = ggml_get_type_traits_cpu(k_vec_dot_type)->from_float;
    const ggml_vec_dot_t    kq_vec_dot     = ggml_get_type_traits_cpu(k->type)->vec_dot;
    const ggml_to_float_t   v_to_float     = ggml_get_type_traits(v->type)->to_float;
    const bool k_f16 = ggml_turbo_fa_k_f16_rows(k);

    float scale = 1.0f, max_bias = 0.0f, logit_softcap = 0.0f;
    memcpy(&scale,         (const float *) dst->op_params + 0, sizeof(float));
    memcpy(&max_bias,      (const float *) dst->op_params + 1, sizeof(float));
    memcpy(&logit_softcap, (const float *) dst->op_params + 2, sizeof(float));
    if (logit_softcap != 0) {
        scale /= logit_softcap;
    }
    const uint32_t n_head_log2 = 1u << (uint32_t) floor(log2(n_head));
    const float m0 = powf(2.0f, -(max_bias       ) / n_head_log2);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2);

    GGML_ASSERT(q_to_vec_dot && "fattn: unsupported K-type");
    GGML_ASSERT((v->type == GGML_TYPE_F32 || v_to_float) && "fattn: unsupported V-type");
    const bool k_multi = ggml_turbo_type_is_turbo(k->type) && k_vec_dot_type == GGML_TYPE_F32;
    const bool v_f16   = v->type == GGML_TYPE_F16;

    if (mode == GGML_TURBO_FA_GROUPED_LOG || mode == GGML_TURBO_FA_GROUPED_EXACT) {
        static std::atomic<bool> said{false};
        if (!said.exchange(true)) {
            fprintf(stderr, "ggml_turbo_fa_decode_chunk: one-query decode with %d Q heads per K/V head, K %s (%s), V %s, softmax %s\n",
                    (int) Gk, ggml_type_name(k->type), k_multi ? "decoded once per row" : k_f16 ? "loaded once per row" : "vec_dot per head",
                    ggml_type_name(v->type), exact ? "per row (exact)" : "per block");
        }
    }

    alignas(64) float scratch[GGML_TURBO_FA_DEC_SCRATCH];
    float * Qb  = scratch;              // G rows of DK: Q of each head in k's vec_dot_type
    float * VKQ = scratch + Gk*DK;      // G rows of DV: each head's accumulator (F16 ones for an F16 V)
    float * V32 = VKQ + Gk*DV;          // one V row as floats
    float * Qf  = V32 + DV;             // F16 K: the G rows of Qb as F32 (k_f16, read where GGML_TURBO_FA_F16_DOT_F32_Q)
    float M[GGML_TURBO_FA_DEC_MAX_G], S[GGML_TURBO_FA_DEC_MAX_G];  // per head: running max and sum
    float slope[GGML_TURBO_FA_DEC_MAX_G], s[GGML_TURBO_FA_DEC_MAX_G];
    const ggml_fp16_t * mp[GGML_TURBO_FA_DEC_MAX_G];               // per head: its mask row

    // the K/V heads of [h0, h1), each with its Q heads hb .. hb + G - 1 of the range (G of them from here on)
    for (int64_t ik2 = h0 / Gk; ik2*Gk < h1; ++ik2) {
        const int64_t hb = std::max(h0, ik2*Gk);
        const int64_t G  = std::min(h1, (ik2 + 1)*Gk) - hb;
        for (int64_t j = 0; j < G; ++j) {
            const int64_t h = hb + j;
            slope[j] = (max_bias > 0.0f) ? h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2*(h - n_head_log2) + 1) : 1.0f;
            M[j] = -INFINITY;
            S[j] = 0.0f;
            if (v_f16) {
                memset(VKQ + j*DV, 0, DV*sizeof(ggml_fp16_t));
            } else {
                memset(VKQ + j*DV, 0, DV*sizeof(float));
            }
            mp[j] = mask ? (const ggml_fp16_t *) ((const char *) mask->data + iq1*mask->nb[1] + (h % mask->ne[2])*mask->nb[2] +
                                                  (iq3 % mask->ne[3])*mask->nb[3]) : nullptr;
            q_to_vec_dot((const float *) ((const char *) q->data + iq1*q->nb[1] + h*q->nb[2] + iq3*q->nb[3]), Qb + j*DK, DK);
            if (k_f16 && GGML_TURBO_FA_F16_DOT_F32_Q) {  // F16 K: Q as F16 (its vec_dot_type), and those values as F32 where they are read
                ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) (Qb + j*DK), Qf + j*DK, DK);
            }
        }
        const int64_t ik3 = iq3 / (q->ne[3] / k->ne[3]);
        const char * k_head = (const char *) k->data + ik2*k->nb[2] + ik3*k->nb[3];
        const char * v_head = (const char *) v->data + ik2*v->nb[2] + ik3*v->nb[3];

        // the scores of row ic for the G heads, scaled, capped and masked as ggml's loop computes them
        // (-inf for a head the mask hides), head j at out[j*stride]; false, with no dot product taken,
        // for a row the mask hides from all G heads (ggml's loop skips it too)
        auto row_scores = [&](int64_t ic, float * out, int64_t stride) {
            float mv[GGML_TURBO_FA_DEC_MAX_G];
            bool any = false;
            for (int64_t j = 0; j < G; ++j) {
                mv[j] = mp[j] ? slope[j]*GGML_CPU_FP16_TO_FP32(mp[j][ic]) : 0.0f;
                out[j*stride] = -INFINITY;
                any |= mv[j] != -INFINITY;
            }
            if (!any) {
                return false;
            }
            const char * k_data = k_head + ic*k->nb[1];
            if (k_multi) {
                ggml_turbo_vec_dot_multi(k->type, (int) DK, (int) G, s, k_data, Qb, DK);
            } else if (k_f16) {  // Qb's rows hold F16 (q_to_vec_dot) DK floats = 2 DK halves apart; Qf the same as F32
                ggml_turbo_fa_dot_f16_multi((int) DK, (int) G, s, (const ggml_fp16_t *) k_data, (const ggml_fp16_t *) Qb, 2*DK, Qf, DK);
            }
            for (int64_t j = 0; j < G; ++j) {
                if (mv[j] == -INFINITY) {
                    continue;
                }
                float sj;
                if (k_multi || k_f16) {
                    sj = s[j];
                } else {
                    kq_vec_dot((int) DK, &sj, 0, k_data, 0, Qb + j*DK, 0, 1);
                }
                sj = sj*scale;
                if (logit_softcap != 0.0f) {
                    sj = logit_softcap*tanhf(sj);
                }
                out[j*stride] = sj + mv[j];
            }
            return true;
        };
        for (int64_t ic0 = ic_start; !exact && ic0 < ic_end; ic0 += GGML_TURBO_FA_DEC_BLOCK) {
            constexpr int64_t NB = GGML_TURBO_FA_DEC_BLOCK;
            const int64_t nb = ic_end - ic0 < NB ? ic_end - ic0 : NB;
            alignas(64) float W[GGML_TURBO_FA_DEC_MAX_G][NB];  // scores, then weights, [head][row]
            bool live[NB];
            bool any_live = false;
            for (int64_t b = 0; b < nb; ++b) {
                live[b] = row_scores(ic0 + b, &W[0][b], NB);
                any_live |= live[b];
            }
            if (!any_live) {
                continue;
            }
            // per head: one running-max update for the block, then its weights exp(s - M) and their sum
            for (int64_t j = 0; j < G; ++j) {
                float mb = -INFINITY;
                for (int64_t b = 0; b < nb; ++b) {
                    mb = W[j][b] > mb ? W[j][b] : mb;
                }
                if (mb == -INFINITY) {  // every row of the block masked for this head: weights 0
                    for (int64_t b = 0; b < nb; ++b) {
                        W[j][b] = 0.0f;
                    }
                    continue;
                }
                if (mb > M[j]) {
                    const float ms = expf(M[j] - mb);  // 0 for the first rows (M = -inf)
                    M[j] = mb;
                    S[j] *= ms;
                    if (v_f16) {
                        ggml_vec_scale_f16((int) DV, (ggml_fp16_t *) (VKQ + j*DV), ms);
                    } else {
                        ggml_vec_scale_f32((int) DV, VKQ + j*DV, ms);
                    }
                }
                S[j] += (float) ggml_vec_soft_max_f32((int) nb, W[j], W[j], M[j]);
            }
            // each row's V, decoded once, added to the heads that weigh it
            for (int64_t b = 0; b < nb; ++b) {
                if (!live[b]) {
                    continue;
                }
                const char * v_data = v_head + (ic0 + b)*v->nb[1];
                int   na = 0;
                int   ha[GGML_TURBO_FA_DEC_MAX_G];
                float va[GGML_TURBO_FA_DEC_MAX_G];
                for (int64_t j = 0; j < G; ++j) {
                    if (W[j][b] != 0.0f) {
                        ha[na] = (int) j;
                        va[na] = W[j][b];
                        ++na;
                    }
                }
                if (na == 0) {
                    continue;
                }
                if (v_f16) {
                    for (int a = 0; a < na; ++a) {
                        ggml_vec_mad_f16((int) DV, (ggml_fp16_t *) (VKQ + ha[a]*DV), (const ggml_fp16_t *) v_data, va[a]);
                    }
                } else {
                    const float * vrow = (const float *) v_data;
                    if (v_to_float) {
                        v_to_float(v_data, V32, DV);
                        vrow = V32;
                    }
                    ggml_turbo_fa_mad_f32_multi((int) DV, VKQ, DV, vrow, va, ha, na);
                }
            }
        }

        for (int64_t ic = ic_start; exact && ic < ic_end; ++ic) {
            float sr[GGML_TURBO_FA_DEC_MAX_G];
            if (!row_scores(ic, sr, 1)) {
                continue;
            }
            const char * v_data = v_head + ic*v->nb[1];
            int   na = 0;                                // F32 accumulators: the heads this row adds to,
            int   ha[GGML_TURBO_FA_DEC_MAX_G];          // and its weight for each (one V pass for all)
            float va[GGML_TURBO_FA_DEC_MAX_G];
            for (int64_t j = 0; j < G; ++j) {
                const float sj = sr[j];
                if (sj == -INFINITY) {  // masked for this head
                    continue;
                }

                const float Mold    = M[j];
                const bool  new_max = sj > Mold;
                float ms = 1.0f;  // the accumulator's rescale when the max moves
                float vs = 1.0f;  // this row's weight, expf(s - M)
                if (new_max) {
                    M[j] = sj;
                    ms = expf(Mold - sj);
                } else {
                    vs = expf(sj - Mold);
                }
                if (v_f16) {
                    ggml_fp16_t * acc = (ggml_fp16_t *) (VKQ + j*DV);
                    if (new_max) {
                        ggml_vec_scale_f16((int) DV, acc, ms);
                    }
                    ggml_vec_mad_f16((int) DV, acc, (const ggml_fp16_t *) v_data, vs);
                } else {
                    if (new_max) {  // rescaled before this row's term is added, as in ggml's loop
                        ggml_vec_scale_f32((int) DV, VKQ + j*DV, ms);
                    }
                    ha[na] = (int) j;
                    va[na] = vs;
                    ++na;
                }
                S[j] = S[j]*ms + vs;
            }
            if (na > 0) {  // the V row, decoded once (quantized types), added to each of the na heads
                const float * vrow = (const float *) v_data;
                if (v_to_float) {
                    v_to_float(v_data, V32, DV);
                    vrow = V32;
                }
                ggml_turbo_fa_mad_f32_multi((int) DV, VKQ, DV, vrow, va, ha, na);
            }
        }

        for (int64_t j = 0; j < G; ++j) {
            const int64_t h = hb + j;
            float * out = partials ? partials + h*partial_stride : nullptr;
            float * acc = out ? out + 2 : V32;  // no partials: V32 (free now) holds the accumulator
            if (v_f16) {
                const ggml_fp16_t * acc16 = (const ggml_fp16_t *) (VKQ + j*DV);
                for (int64_t d = 0; d < DV; ++d) {
                    acc[d] = GGML_CPU_FP16_TO_FP32(acc16[d]);
                }
            } else {
                memcpy(acc, VKQ + j*DV, DV*sizeof(float));
            }
            if (sinks && ic_start == 0) {  // as ggml: the sink of each head joins the first chunk
                const float sk = ((const float *) sinks->data)[h];
                float ms = 1.0f, vs = 1.0f;
                if (sk > M[j]) {
                    ms = expf(M[j] - sk);
                    M[j] = sk;
                    ggml_vec_scale_f32((int) DV, acc, ms);
                } else {
                    vs = expf(sk - M[j]);
                }
                S[j] = S[j]*ms + vs;
            }
            if (out) {
                out[0] = M[j];
                out[1] = S[j];
            } else {  // as ggml's loop ends a query: VKQ/S into dst's row of head h, query iq1 (permute(0, 2, 1, 3))
                const float S_inv = S[j] == 0.0f ? 0.0f : 1.0f/S[j];
                ggml_vec_scale_f32((int) DV, acc, S_inv);
                memcpy((char *) dst->data + (iq3*dst->ne[2]*dst->ne[1] + h + iq1*dst->ne[1])*dst->nb[1], acc, dst->nb[1]);
            }
        }
    }
    return true;
}

// Below the split (fewer than 512 cells, or several queries; no tile: fewer than ggml_fa_tile_config::Q queries per
// stream) with a quantized K or V (ggml_turbo_fa_decode_applies): thread ith of nth takes its share of the (query,
// Q head) pairs over all streams, query by query, each query's heads of a K/V head together, every cell in ggml's
// order. A query's output is then the same floats whether it came alone (a one-token decode) or in a batch
// (speculative decoding's verification of its drafts, several sequences' tokens in one ubatch, in one stream or one
// stream each): the batch of ggml's loop and our one-query path would otherwise sum in different orders, and a turbo
// cache can turn that last-bit difference into another code a layer later (docs/CPU.md, sessions 27 and 28).
static void ggml_turbo_fa_decode_rows(const ggml_tensor * dst, int ith, int nth) {
    const ggml_tensor * q = dst->src[0];
    const int64_t n_head = q->ne[2], N = q->ne[1], n_q = N*q->ne[3], n_kv = dst->src[1]->ne[1];
    const int64_t u0 = n_q*n_head*ith/nth, u1 = n_q*n_head*(ith + 1)/nth;  // this thread's pairs, query-major
    for (int64_t u = u0; u < u1; ) {
        const int64_t iq = u / n_head, h0 = u % n_head, h1 = std::min(n_head, h0 + (u1 - u));
        ggml_turbo_fa_decode_chunk(dst, iq % N, iq / N, h0, h1, 0, n_kv, nullptr, 0);
        u += h1 - h0;
    }
}
