// tqgguf: flash-attention decode kernel for turbo K and turbo V caches (one query per
// sequence), all the Q heads of one K/V head in one block.
//
// Included from fattn-vec.cuh (after fattn-common.cuh); ggml_cuda_flash_attn_ext_vec_case
// calls ggml_cuda_turbo_fa_dec first and falls back to the vector kernel when it declines.
//
// Why a kernel of its own: the vector kernel (with ncols2 = 2 at head dim 128) is bound by
// instructions, not bytes (Nsight Compute, session 8: issue slots 56%, DRAM 16%). Per K/V row
// it decodes the turbo indices once per block, and a block holds at most 2 of the 4 Q heads
// that share the row at hd 128 (registers). Here:
//   - a block is (sequence, K/V head, KV split) and holds G = 4 (or 2, 1) Q heads; every K and
//     V byte is read and decoded once for the G heads.
//   - K.Q: 4 lanes per K row, each decodes its 32 elements to int8 centroids once (register
//     PRMT tables, as the vector kernel) and runs G dp4a chains against Q as q8_1.
//   - V: D/8 lanes per V row, 8 elements each (one 4-byte load of turbo4/turbo2 indices, three
//     of turbo3), decoded once to fp16 centroids, then G half2 FMAs per pair of elements into
//     fp16 partial sums that are added into fp32 accumulators after every tile of 32 rows per
//     warp (a partial sums at most 16 rows of weights <= 1; upstream's HIP vector kernel keeps
//     its whole accumulation in half2).
//   - the softmax weights are handed from the K lanes to the V lanes through shared memory as
//     half2 (one 16-byte load per row for G = 4); each warp keeps its own running max and sum
//     over its rows of each tile, and the 4 warps are merged once at the end (no block barrier
//     inside the KV loop).
//   - G by the wave rule (ggml_cuda_turbo_fa_dec_heads): grouped only when the grid of
//     Q heads / G x sequences x KV tiles still fills the GPU, so a short cache is not left to
//     one block's latency.
//   - the KV length is split over gridDim.y by upstream's launch_fattn (parallel blocks chosen
//     to fill whole waves) and merged by its combine kernel, as for the vector kernel.
// Head dims 64 and 128 (the tensor-core kernel: 64, 128 and 256); no logit softcap (those go to the vector kernel).
// ALiBi, sinks, the mask and KV_max as in the vector kernel.
//
// GGML_CUDA_TURBO_FA_DEC (run time, read once): 0 = never (the vector kernel, as before this
// change), 1 = use this kernel, 2 and 3 its staged variants, 4..21 the tensor-core kernel (below); unset =
// GGML_CUDA_TURBO_FA_DEC_DEFAULT. For A/B runs of one build.
#pragma once

#include "common.cuh"
#ifndef GGML_CUDA_TURBO_HOST_CHECK  // tests/cuda_host/fa_dec_emul.cpp runs the kernel on the CPU, without the launcher
#include "fattn-common.cuh"
#endif
#include "turbo.cuh"

#ifndef GGML_CUDA_TURBO_FA_DEC_DEFAULT
#define GGML_CUDA_TURBO_FA_DEC_DEFAULT 14  // turbo4/turbo4 at hd 128: the tensor-core kernel, next tile's K loaded ahead (the first tile's before Q), aligned words, K and V as 7-bit codes in sign-mode lookups (sessions 23 and 29); what the default runs for every other shape: ggml_cuda_turbo_fa_dec
#endif

static constexpr int ggml_cuda_turbo_fa_dec_nwarps = 4;
static constexpr int ggml_cuda_turbo_fa_dec_rows   = ggml_cuda_turbo_fa_dec_nwarps*WARP_SIZE;  // KV rows per tile

// the shapes of the tensor-core kernel (turbo-fattn-mma.cuh): a turbo V with a turbo, q8_0 or f16 K at hd 64, 128 and
// 256. q8_0 and f16 K: their values as K.Q's A operand as stored -- q8_0's int8 (ggml_cuda_turbo_fa_mma_q8_words) in the
// int8 mma, f16 in the fp16 mma against Q as fp16 (ggml_cuda_turbo_fa_mma_f16_row; session 30). hd 256: a turbo4 row as
// two hd-128 halves of 68 bytes (17 words; variant 15, session 29). hd 64: a turbo row is one block at a 2-byte aligned
// start (variant 18, session 31). Which variant runs which shape by default: ggml_cuda_turbo_fa_dec below.
static constexpr __host__ __device__ bool ggml_cuda_turbo_fa_mma_supported(const int D, const ggml_type type_K, const ggml_type type_V) {
    return (D == 64 || D == 128 || D == 256) && (ggml_cuda_type_is_turbo(type_K) || type_K == GGML_TYPE_Q8_0 || type_K == GGML_TYPE_F16) &&
           ggml_cuda_type_is_turbo(type_V);
}
// the shapes a decode kernel of this file covers: variants 1..3 at hd 64 and 128 for turbo K and V, and the tensor-core
// kernel's (variants 4 and up; where a variant does not take a shape the vector kernel runs)
static constexpr __host__ __device__ bool ggml_cuda_turbo_fa_dec_supported(const int D, const ggml_type type_K, const ggml_type type_V) {
    return ((D == 64 || D == 128) && ggml_cuda_type_is_turbo(type_K) && ggml_cuda_type_is_turbo(type_V)) ||
           ggml_cuda_turbo_fa_mma_supported(D, type_K, type_V);
}

// Variants (GGML_CUDA_TURBO_FA_DEC=1..8, one build measures all; docs/CUDA.md "session 11", "session 12"):
//   1: K and V rows read straight from global memory by the lanes that decode them (2-byte loads:
//      a turbo4 block's indices start at byte 2), the next tile's loads only after this tile's math.
//   2: staged: each warp copies its 32 K and 32 V rows of the NEXT tile into shared memory with
//      16-byte cp.async (aligned chunks, ggml_cuda_turbo_fa_dec_slot bytes per row) while it decodes
//      the current tile from shared memory: the bytes in flight no longer depend on occupancy, and
//      the global loads are 16-byte, coalesced over the rows' chunks.
//   3: 2 with 4 resident blocks per SM (<= 128 registers): 16 warps per SM, and launch_fattn's
//      split then gives more, shorter KV ranges per K/V head (less tail at 1 sequence).
//   4: K.Q and P.V on tensor cores (turbo-fattn-mma.cuh): turbo4 K and V at head dim 128; other
//      shapes run variant 1.
//   5: 4 with the rows staged a tile ahead in shared memory (cp.async), as 2 does for 1.
//   6: 4 at 4 resident blocks per SM (128 registers, no spill): Nsight Compute found 4 latency-bound
//      at its 12 warps per SM (session 12); measured (session 13): turbo4 32.2 -> 28.7 us, turbo3
//      34.1 -> 30.7 (FA alone, hd 128, KV 32768).
//   7: 4 with a tile's V rows loaded before its K.Q (one DRAM wait per tile), 2 blocks per SM;
//      turbo4 V only (other V types run 4); measured: 30.7 us.
//   8: 7 with the K words and mask values of a warp's next tile loaded while it computes this one
//      (register double-buffering: K.Q never waits on DRAM); turbo4 K and V (other pairs run 4);
//      measured: 25.4 us, the default.
//   (8 at 3 or 4 resident blocks per SM, <= 168 / 128 registers, was measured in session 16 and is
//   slower: 30.99 / 30.90 us against 25.37; Nsight Compute: the spills add long-scoreboard stalls, and
//   the ALU pipe (the codebook's PRMT/LOP3) is what bounds variant 8, docs/CUDA.md "Session 16")
//   9: 8 with V's centroids as int8 (v_i8 in turbo-fattn-mma.cuh: one lookup per 4 V values instead
//      of two byte planes); turbo4 K and V (other pairs run 6, as for 8). Measured (session 17):
//      25.54 -> 22.87 us (the default until session 22).
//  10: 6 (no early V, no next-tile K, 4 blocks per SM) with v_i8: 128 registers; every turbo pair.
//      Measured (session 17, FA alone): turbo3 30.54 -> 29.86 us, turbo2 24.45 -> 23.46 against 6,
//      turbo4 25.77; not the default for those pairs until a model-level run in the same session
//      agrees (turbo3's tg64 @ 64K in a later call, 171.18 t/s, was below session 13's 180.78 with 6).
//   (9 at 3 resident blocks per SM -- 168 registers, no spill, since v_i8 frees what 8 spilled there --
//   was measured in session 17 and is slower: 26.53 us)
//   (Session 20 measured and removed three more, FA alone turbo4 at KV 32768 against 9's 22.98 us: 10
//   with the next tile's K and V rows prefetched into L2 at 4 blocks per SM, 26.60; 9 with that prefetch
//   instead of the next tile's K in registers at 3 blocks per SM, 28.78; 9 with the first tile's loads
//   issued before Q is quantized, 24.61. docs/CUDA.md "Session 20".)
//  11: 9 with K's and V's words read as the row's aligned words (aw in turbo-fattn-mma.cuh): per
//      lane and tile 56 loads instead of 72 (SASS of the KV loop: 78 LDG instead of 100, 1,101
//      instructions instead of 1,080: the addresses cost some of it back); turbo4 K and V (other
//      pairs run 6). Measured (session 22, FA alone, three interleaved rounds): KV 32768 22.84 ->
//      22.69 us, 65536 42.12 -> 41.24, 131072 76.37 -> 74.52, 8192 9.76 -> 9.91; 8B shape tg64 @
//      16K 258.2 -> 262.5 t/s, @ 64K 202.9 -> 205.1. The default until session 23.
//  12: 11 with K's and V's centroids as 7-bit codes looked up in PRMT's sign mode (s7 in
//      turbo-fattn-mma.cuh: 3 ALU instructions per 4 values instead of 6; the codes' step is the
//      generated GGML_TURBO4_CODE7_STEP); turbo4 K and V (other pairs run 6). Measured (session 23,
//      FA alone, three interleaved rounds, against 11): KV 32768 22.34 -> 19.93 us, 131072 72.70 ->
//      64.09; 8B shape serving 240 x (4096 + 128) S_TG 3412.5 -> 3616.8 t/s. The default until session 29.
//  13: 12 for K only (V as in 11): KV 32768 21.62 us.
//  14: 12 with the first tile's K words loaded before Q is read (k_first in turbo-fattn-mma.cuh), the
//      same floats. Measured (session 29, an H100, FA alone, three interleaved rounds, against 12): 256
//      cells 5.95-6.04 -> 5.86-5.91 us, 1024 6.50 -> 6.40-6.42, 2048 7.97 -> 7.91, 32768 19.74 -> 19.71;
//      8B shape tg64 @ d0 302.8 -> 303.1 t/s (f16 329.8). The default.
//  15: 12 with K's words read in their tile, not a tile ahead (no next_k); also hd 256 (turbo4 K and V, a row
//      as two 68-byte halves: turbo-fattn-mma.cuh), where next_k's registers do not fit beside V's and O's
//      (250 registers at sm_90, no spills). Measured (session 30, an H100): test-backend-ops 128 turbo4/turbo4 FA
//      cases OK; FA alone at hd 256 (1 K/V head, GQA 4, KV 32768) 31.5 us (the vector kernel) -> 17.7; Gemma-3-4B
//      shape tg64 @ d65536 0.868x -> 1.003x f16. hd 256 runs it for every variant from 4 (0..3: the vector kernel).
//  16: q8_0 or f16 K with a turbo V at hd 256 on the tensor-core kernel (V's words read in P.V; 255 registers at sm_90,
//      no spills). Measured (session 31, an H100): 296 test-backend-ops cases OK; FA alone (1 K/V head, GQA 4, KV 32768)
//      q8_0/turbo4 33.9 -> 18.9 us, f16/turbo4 28.1 -> 24.5 (the vector kernel: f16/f16 24.2); Gemma-3-4B shape tg64
//      q8_0/turbo4 0.84 / 0.85 / 0.89x f16 -> 0.88 / 0.89 / 1.01x at d0 / 16K / 64K. hd 256 runs it for every variant
//      from 4. At hd 128 those pairs take the tensor-core kernel from variant 4 on (session 30: 296 test-backend-ops
//      cases OK; q8_0/turbo4 FA alone 82.6 -> 32.5 us, f16/turbo4 57.3 -> 34.6); 16 there gives session 30's code.
//  17: q8_0 K with turbo4 V at hd 128 read as aligned words, both sides (ggml_cuda_turbo_fa_mma_q8_words_aw: 12 loads
//      a K row and lane instead of 16), 3 blocks per SM (149 registers at sm_90, no spills; session 30's 202 allow 2).
//      Measured (session 31, an H100): 124 test-backend-ops cases OK; FA alone 32.75 -> 32.25 us (three rounds); 8B
//      shape tg64 0.895 / 1.036 / 1.296x f16 -> 0.905 / 1.034 / 1.400x at d0 / 16K / 64K. q8_0/turbo4 at hd 128 runs it
//      for every variant from 4 but 10 and 16. Other pairs: their default.
//  18: hd 64 on the tensor-core kernel, every turbo pair and q8_0 / f16 K with a turbo V (a row is one block whose start
//      is 2-byte aligned: turbo4's index words from two 2-byte loads, ggml_cuda_turbo_fa_mma_word2), rows read in their
//      tile, V as int8 centroids, 4 blocks per SM (108-128 registers at sm_90, no spills). Measured (session 31, an H100):
//      232 test-backend-ops cases OK; FA alone (8 K/V heads, GQA 8, KV 7680) turbo4 13.0 -> 9.6 us (variant 1),
//      q8_0/turbo4 18.2 -> 9.4 (the vector kernel); Llama-3.2-1B shape tg64 q8_0/turbo4 0.86 / 0.90 / 0.97x f16 ->
//      0.86 / 0.94 / 1.22x at d0 / 16K / 64K, turbo4 0.87 / 0.96 / 1.20x (variant 1) -> 0.85 / 0.91 / 1.21x. So q8_0
//      and f16 K take it from variant 4 on; turbo K only when asked (variant 1 otherwise). Other shapes: their default.
//  19: turbo3 K and V as index words (t3 in turbo-fattn-mma.cuh: 8 fields of a row's elements in one word of nibbles, as a
//      turbo4 index word holds them: per 8 values 6 ALU instructions and one PRMT lookup per 4 instead of two
//      ggml_cuda_turbo3_sel4_rows and masked lookups), at hd 64 (18's code) and 128 (10's code, 4 blocks per SM; q8_0 and
//      f16 K with turbo3 V: their code); pairs with turbo3 K or V. Written and emulated in session 31, then measured
//      (an H100): 139 test-backend-ops cases OK (hd 64 and 128, every pair with
//      turbo3 on a side); FA alone turbo3/turbo3 (hd 128, GQA 4, KV 32768) 30.2-30.6 us (variant 6) -> 23.0, 8B shape
//      tg64 @ 16K 234.6 -> 252.2 t/s, @ 64K 176.3 -> 194.6 (three interleaved rounds). So pairs with turbo3 take it at
//      hd 128 from variant 11 on (6 gives their code before it) and with q8_0 / f16 K at hd 64 (18 gives without it);
//      turbo K at hd 64 only when asked, as 18. Other pairs: their default.
//  20: 19 with turbo2 K and V as index words too (t2 in turbo-fattn-mma.cuh: a word of qs masked with 0x33333333 is two
//      fields of each byte as its nibbles, 3 instructions per 16 values), pairs with turbo2 K or V at hd 64 and 128.
//      Written and emulated in session 31, measured in session 32 (an H100): 136 test-backend-ops cases OK (hd 64 and
//      128, every pair with turbo2 on a side); FA alone turbo2/turbo2 (hd 128, GQA 4, KV 32768) 23.6 us -> 17.1; 8B shape
//      tg64 0.879 / 1.045 / 1.404x f16 -> 0.897 / 1.063 / 1.548x at d0 / 16K / 64K; decode-path KLD against variant 6
//      0.000001 (the floor 0.000000). So turbo2's words run wherever turbo3's do (ggml_cuda_turbo_fa_t2_words: every
//      variant from 11 but 16, 18 and 19, which give the code before them). Other pairs: their default.
//  21: hd 256 for the turbo pairs other than turbo4/turbo4 (Gemma-2/3-class heads with turbo3 or turbo2 on a side): 19's
//      and 20's words, turbo4 K as two 68-byte halves (15's reads without the aligned words), V's words read in P.V, 2
//      blocks per SM. Written and emulated in session 31, measured in session 32 (an H100): 64 test-backend-ops cases OK;
//      FA alone (1 K/V head, GQA 4, KV 32768) turbo3 31.8 us (the vector kernel) -> 17.7, turbo2 22.3 -> 14.5; Gemma-3-4B
//      shape turbo3 tg64 0.864 / 0.857 / 0.847x f16 -> 0.903 / 0.870 / 1.006x; decode-path KLD against the vector kernel
//      turbo3 0.000009, turbo2 0.000014 (Same top p 100 % and 86 % on the random-weight shape, whose near-flat
//      distributions flip the top token on the smallest change). So the pairs without turbo2 take it for every variant
//      from 4; pairs with turbo2 only when asked (the vector kernel otherwise) until a model with real weights measures
//      their top token.
static constexpr int ggml_cuda_turbo_fa_dec_nvariants = 21;

// the pairs variant 19 changes: turbo3 K or V
static constexpr __host__ __device__ bool ggml_cuda_turbo_fa_t3(const ggml_type type_K, const ggml_type type_V) {
    return type_K == GGML_TYPE_TURBO3_0 || type_V == GGML_TYPE_TURBO3_0;
}
// the pairs variant 20 adds: turbo2 K or V
static constexpr __host__ __device__ bool ggml_cuda_turbo_fa_t2(const ggml_type type_K, const ggml_type type_V) {
    return type_K == GGML_TYPE_TURBO2_0 || type_V == GGML_TYPE_TURBO2_0;
}
// whether variant VAR reads turbo2 as index words at hd 64 and 128 (variant 20's code; the default since session 32):
// every variant from 11 but 16, 18 and 19, which run their code as measured before turbo2's words (A/B runs)
static constexpr __host__ __device__ bool ggml_cuda_turbo_fa_t2_words(const int VAR) {
    return VAR >= 11 && VAR != 16 && VAR != 18 && VAR != 19;
}
// whether variant VAR reads turbo3 as index words (variant 19's code) on the tensor-core kernel at head dim D, kq: q8_0 or
// f16 K: hd 64 but with 18; hd 128 with turbo K from 11 on (6 gives the code before it), with q8_0 / f16 K but with 10
// and 16; hd 256 with turbo K (21's code: taken for every variant from 4 where the pair has no turbo2), never with
// q8_0 / f16 K (16's code)
static constexpr __host__ __device__ bool ggml_cuda_turbo_fa_t3_words(const int D, const bool kq, const int VAR) {
    return D == 64 ? VAR != 18 : D == 128 ? (kq ? VAR != 10 && VAR != 16 : VAR >= 11) : !kq;
}

// minimum resident blocks per SM in __launch_bounds__ (128 threads): 3 -> at most 168 registers
static constexpr __host__ __device__ int ggml_cuda_turbo_fa_dec_min_blocks(const int D, const int G, const int VAR = 1) {
    return G <= 2 || VAR >= 3 ? 4 : 3;
}

// shared-memory bytes per staged row (VAR >= 2): the row's bytes from the 16-byte aligned address
// below its start; a row starts at a multiple of 4 when its size is (turbo4, turbo3 and turbo2 at
// hd 128), else of 2 (the host checks the strides: ggml_cuda_turbo_fa_dec_stage_ok)
template <ggml_type type, int D>
static constexpr __host__ __device__ int ggml_cuda_turbo_fa_dec_row_bytes() {
    return (D/64)*sizeof(typename ggml_cuda_turbo_traits<type>::block);
}
template <ggml_type type, int D>
static constexpr __host__ __device__ int ggml_cuda_turbo_fa_dec_row_align() {
    return ggml_cuda_turbo_fa_dec_row_bytes<type, D>() % 4 == 0 ? 4 : 2;
}
template <ggml_type type, int D>
static constexpr __host__ __device__ int ggml_cuda_turbo_fa_dec_slot() {
    return (ggml_cuda_turbo_fa_dec_row_bytes<type, D>() + (16 - ggml_cuda_turbo_fa_dec_row_align<type, D>()) + 15) / 16 * 16;
}

// 16 bytes global -> shared, asynchronous where the GPU has cp.async (sm_80+); a plain copy
// elsewhere (and in the host emulation, tests/cuda_host/fa_dec_emul.cpp)
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_cp16(void * dst_shared, const void * src) {
#ifdef CP_ASYNC_AVAILABLE
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
        : : "r"((unsigned int) __cvta_generic_to_shared(dst_shared)), "l"(src) : "memory");
#else
    memcpy(dst_shared, src, 16);
#endif
}
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_cp_commit() {
#ifdef CP_ASYNC_AVAILABLE
    asm volatile("cp.async.commit_group;" : : : "memory");
#endif
}
// this thread's copies of all groups but the newest are done
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_cp_wait_prev() {
#ifdef CP_ASYNC_AVAILABLE
    asm volatile("cp.async.wait_group 1;" : : : "memory");
#endif
}

// slot of row r (0..31) of a warp's tile: rows 4k + i (k = 0..7) are slots 8i + k, so the 8 rows
// that one K step reads (4 lanes each) lie in consecutive slots: 8 x 4 words on distinct banks
static __device__ __forceinline__ int ggml_cuda_turbo_fa_dec_slot_of(const int r) {
    return 8*(r % 4) + r/4;
}

// the 32 rows kw.. of a warp (K or V, row stride nb) into dst, slot bytes per row: lane l copies
// row l, the 16-byte chunks from the aligned address below its start that hold its bytes
template <int row_bytes, int slot>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_stage(char * dst, const char * src, const int kw, const int nb, const int lane) {
    const char * s   = src + (int64_t) (kw + lane)*nb;
    const int    off = (int) ((uintptr_t) s & 15);
    char       * d   = dst + ggml_cuda_turbo_fa_dec_slot_of(lane)*slot;
#pragma unroll
    for (int ch = 0; ch < slot/16; ++ch) {
        if (ch < (slot - 16)/16 || 16*ch < off + row_bytes) {  // the last chunk only when the row reaches it
            ggml_cuda_turbo_fa_dec_cp16(d + 16*ch, s - off + 16*ch);
        }
    }
}

// decode the K row's elements of lane t (of 4 per row): v[i] = int8 centroids of elements
// 16 i + 4 t .. + 3 (the q8_1 Q int 4 i + t), dk[m] = scale of block m.
template <ggml_type type_K, int D>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_K(const char * __restrict__ K_row, const int t,
        int (&v)[D/16], float (&dk)[D/64]) {
    typedef ggml_cuda_turbo_traits<type_K> tt;
    const typename tt::block * K = (const typename tt::block *) K_row;
#pragma unroll
    for (int m = 0; m < D/64; ++m) {
        const typename tt::block * b = K + m;
        dk[m] = __half2float(b->d);
        if constexpr (type_K == GGML_TYPE_TURBO3_0) {
            const ggml_cuda_turbo3_rows rows = ggml_cuda_turbo3_load_rows<true, true>(b, 4*(t % 2));
#pragma unroll
            for (int q = 0; q < 4; ++q) {  // elements 16q + 4t = 8(2q + t/2) + 4(t%2)
                v[4*m + q] = (int) ggml_cuda_turbo_table4<type_K, 0>(ggml_cuda_turbo3_sel4_rows(rows, 2*q + t/2, q >= 2));
            }
        } else {
#pragma unroll
            for (int q = 0; q < 2; ++q) {  // elements 16q + 4t (< 32) and 32 more
                uint32_t sa, sb;
                ggml_cuda_turbo_sel4_pair<type_K>(b, 16*q + 4*t, sa, sb);
                v[4*m + q]     = (int) ggml_cuda_turbo_table4<type_K, 0>(sa);
                v[4*m + q + 2] = (int) ggml_cuda_turbo_table4<type_K, 0>(sb);
            }
        }
    }
}

// selectors of the V elements of lane c (of D/8 per row): elements o..o+3 (a) and
// o+32..o+35 (b) of block c/8, o = 4 (c % 8)
template <ggml_type type_V>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_V_sel(const void * __restrict__ vb, const int c, uint32_t & sa, uint32_t & sb) {
    if constexpr (type_V == GGML_TYPE_TURBO3_0) {
        const ggml_cuda_turbo3_rows rows = ggml_cuda_turbo3_load_rows<true, true>((const block_turbo3_0 *) vb, 4*(c % 2));
        sa = ggml_cuda_turbo3_sel4_rows(rows, (c % 8)/2,     false);
        sb = ggml_cuda_turbo3_sel4_rows(rows, (c % 8)/2 + 4, true);
    } else {
        ggml_cuda_turbo_sel4_pair<type_V>(vb, 4*(c % 8), sa, sb);
    }
}

template <ggml_type type_V>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_V_c(const uint32_t sel, half2 & c01, half2 & c23) {
    const uint32_t lo = ggml_cuda_turbo_table4<type_V, 1>(sel);
    const uint32_t hi = ggml_cuda_turbo_table4<type_V, 2>(sel);
    const uint32_t u01 = __byte_perm(lo, hi, 0x5140);
    const uint32_t u23 = __byte_perm(lo, hi, 0x7362);
    c01 = *((const half2 *) &u01);
    c23 = *((const half2 *) &u23);
}

// The end of both decode kernels: the G heads' outputs of the block, summed over its warps (sh_acc:
// each warp's accumulators already scaled to the block's max, sh_sum: its softmax sums, sh_max: its
// maxima), into dst -- normalized when the KV length is not split (gridDim.y == 1), else as one part
// of launch_fattn's split with its (max, sum) in dst_meta for the combine kernel. row0: the dst row of
// head0 (sequence * n_queries * n_heads + head0, one query per sequence). Every thread calls it.
template <int D, int G, int nwarps>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_dec_write(const float (*sh_sum)[nwarps], const float (*sh_max)[nwarps],
        const float (*sh_acc)[G][D], float * dst_ptr, float2 * dst_meta_ptr, const int row0, const int tid, const int ng = G) {
#pragma unroll
    for (int j = tid; j < ng*D; j += nwarps*WARP_SIZE) {
        const int h = j / D;
        const int i = j % D;
        float sum = 0.0f;
        float val = 0.0f;
#pragma unroll
        for (int w = 0; w < nwarps; ++w) {
            sum += sh_sum[h][w];
            val += sh_acc[w][h][i];
        }
        if (gridDim.y == 1) {
            val /= sum;
        }
        dst_ptr[(row0 + h)*gridDim.y*D + blockIdx.y*D + i] = val;
    }
    if (gridDim.y != 1 && tid < ng) {
        float gmax = sh_max[tid][0];
        float sum  = 0.0f;
#pragma unroll
        for (int w = 0; w < nwarps; ++w) {
            gmax = fmaxf(gmax, sh_max[tid][w]);
            sum += sh_sum[tid][w];
        }
        dst_meta_ptr[(row0 + tid)*gridDim.y + blockIdx.y] = make_float2(gmax, sum);
    }
}

template <int D, int G, ggml_type type_K, ggml_type type_V, int VAR = 1>
__launch_bounds__(ggml_cuda_turbo_fa_dec_nwarps*WARP_SIZE, ggml_cuda_turbo_fa_dec_min_blocks(D, G, VAR))
static __global__ void flash_attn_ext_turbo_dec(
        const char * Q_ptr,
        const char * K_ptr,
        const char * V_ptr,
        const char * mask_ptr,
        const char * sinks_ptr,
        const int  * KV_max_ptr,
        float      * dst_ptr,
        float2     * dst_meta_ptr,
        const float scale,
        const float max_bias,
        const float m0,
        const float m1,
        const uint32_t n_head_log2,
        const float logit_softcap,
        const int32_t ne00, const uint3   ne01, const int32_t ne02, const int32_t ne03,
                            const int32_t nb01, const int32_t nb02, const int32_t nb03,
        const int32_t ne10, const int32_t ne11, const int32_t ne12, const int32_t ne13,
                            const int32_t nb11, const int32_t nb12, const int64_t nb13,
                            const int32_t nb21, const int32_t nb22, const int64_t nb23,
                            const int32_t ne31, const int32_t ne32, const int32_t ne33,
                            const int32_t nb31, const int32_t nb32, const int64_t nb33) {
    ggml_cuda_pdl_lc();
#if defined(FLASH_ATTN_AVAILABLE) && defined(FAST_FP16_AVAILABLE) && !defined(GGML_USE_HIP) // half2 arithmetic; the host side asks fast_fp16_available
    static_assert(D == 64 || D == 128, "head dim");
    static_assert(G == 1 || G == 2 || G == 4, "heads per block");
    constexpr int nwarps = ggml_cuda_turbo_fa_dec_nwarps;
    constexpr int NK     = 4;              // lanes per K row
    constexpr int NI     = D/16;           // Q ints per K lane (4 elements each)
    constexpr int NB     = D/64;           // turbo blocks per row
    constexpr int NV     = D/8;            // lanes per V row (8 elements each)
    constexpr int VR     = WARP_SIZE/NV;   // V rows per warp step
    constexpr int T      = ggml_cuda_turbo_fa_dec_rows;
    constexpr bool stage = VAR >= 2;
    constexpr int RBK    = ggml_cuda_turbo_fa_dec_row_bytes<type_K, D>();
    constexpr int RBV    = ggml_cuda_turbo_fa_dec_row_bytes<type_V, D>();
    constexpr int SK     = ggml_cuda_turbo_fa_dec_slot<type_K, D>();
    constexpr int SV     = ggml_cuda_turbo_fa_dec_slot<type_V, D>();

    const char * GGML_CUDA_RESTRICT Q      = Q_ptr;
    const char * GGML_CUDA_RESTRICT K      = K_ptr;
    const char * GGML_CUDA_RESTRICT V      = V_ptr;
    const int  * GGML_CUDA_RESTRICT KV_max = KV_max_ptr;

    const int lane = threadIdx.x;
    const int warp = threadIdx.y;
    const int tid  = warp*WARP_SIZE + lane;

    const int sequence  = blockIdx.z / (ne02/G);
    const int head0     = (blockIdx.z - sequence*(ne02/G))*G;  // first of the block's G Q heads
    const int gqa_ratio = ne02 / ne12;
    Q += nb03*sequence + nb02*head0;
    K += nb13*sequence + nb12*(head0 / gqa_ratio);
    V += nb23*sequence + nb22*(head0 / gqa_ratio);
    const half * maskh = mask_ptr ? (const half *) (mask_ptr + nb33*(sequence % ne33)) : nullptr;

    float slope[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        slope[h] = get_alibi_slope(max_bias, head0 + h, n_head_log2, m0, m1);
    }

    __shared__ int    sh_q[G][D/4 < WARP_SIZE ? WARP_SIZE : D/4];  // quantize_q8_1_to_shared writes a whole warp
    __shared__ float2 sh_qds[G][D/32];
    __shared__ __align__(16) half2 sh_p[nwarps][WARP_SIZE][G];  // softmax weights of a warp's 32 rows
    // the staged rows (VAR >= 2: two tiles of a warp's 32 K and 32 V rows) and, after the KV
    // loop, the accumulators of the warps' merge share one array
    constexpr int n_stage = stage ? 2*nwarps*WARP_SIZE*(SK + SV) : 0;
    constexpr int n_acc   = nwarps*G*D*(int) sizeof(float);
    __shared__ __align__(16) char sh_buf[n_stage > n_acc ? n_stage : n_acc];
    float (*sh_acc)[G][D] = (float (*)[G][D]) sh_buf;
    __shared__ float  sh_max[G][nwarps];
    __shared__ float  sh_sum[G][nwarps];

    ggml_cuda_pdl_sync();
    // Q (scaled) to q8_1, one warp per head
    for (int h = warp; h < G; h += nwarps) {
        const float * Q_f = (const float *) (Q + h*nb02);
        constexpr int nq = D/4 < WARP_SIZE ? D/4 : WARP_SIZE;
#pragma unroll
        for (int i0 = 0; i0 < D/4; i0 += nq) {
            quantize_q8_1_to_shared<float2, nq>(Q_f + 4*i0, scale, &sh_q[h][i0], &sh_qds[h][i0/QI8_1]);
        }
    }
    __syncthreads();

    const int tk = lane % NK;  // lane in its K row
    int   Qi[G][NI];
    float Qd[G][D/32];
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            Qi[h][i] = sh_q[h][NK*i + tk];
        }
#pragma unroll
        for (int k = 0; k < D/32; ++k) {
            Qd[h][k] = sh_qds[h][k].x;
        }
    }

    const int cv = lane % NV;  // lane in its V row
    const int rv = lane / NV;  // V row within a step
    float VKQ[G][8];
    float KQ_max[G];
    float KQ_sum[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        KQ_max[h] = -FLT_MAX/2.0f;
        KQ_sum[h] = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            VKQ[h][k] = 0.0f;
        }
    }

    const int k_VKQ_max = KV_max ? KV_max[sequence*gridDim.x + blockIdx.x] : ne11;
    // staged rows of this warp: tile buffer b at sh_buf + (b*nwarps + warp)*32*(SK + SV), K then V
    char * const stage_base = sh_buf + warp*WARP_SIZE*(SK + SV);
    constexpr int stage_buf = nwarps*WARP_SIZE*(SK + SV);
    int buf = 0;
    if constexpr (stage) {
        if (blockIdx.y*T < k_VKQ_max) {
            const int kw = blockIdx.y*T + warp*WARP_SIZE;
            ggml_cuda_turbo_fa_dec_stage<RBK, SK>(stage_base, K, kw, nb11, lane);
            ggml_cuda_turbo_fa_dec_stage<RBV, SV>(stage_base + WARP_SIZE*SK, V, kw, nb21, lane);
        }
        ggml_cuda_turbo_fa_dec_cp_commit();
    }
    const uint32_t K_lo = (uint32_t) (uintptr_t) K;  // low bits of the rows' addresses: their offsets in the slots
    const uint32_t V_lo = (uint32_t) (uintptr_t) V;
    for (int k0 = blockIdx.y*T; k0 < k_VKQ_max; k0 += gridDim.y*T) {
        const int kw = k0 + warp*WARP_SIZE;  // first row of this warp
        const char * sK = stage_base + buf*stage_buf;
        const char * sV = sK + WARP_SIZE*SK;
        if constexpr (stage) {
            const int kn = k0 + gridDim.y*T;
            if (kn < k_VKQ_max) {  // the next tile into the other buffer (last read in the previous iteration)
                char * nK = stage_base + (buf ^ 1)*stage_buf;
                ggml_cuda_turbo_fa_dec_stage<RBK, SK>(nK, K, kn + warp*WARP_SIZE, nb11, lane);
                ggml_cuda_turbo_fa_dec_stage<RBV, SV>(nK + WARP_SIZE*SK, V, kn + warp*WARP_SIZE, nb21, lane);
            }
            ggml_cuda_turbo_fa_dec_cp_commit();
            ggml_cuda_turbo_fa_dec_cp_wait_prev();  // this tile's copies (of this lane) are done
            __syncwarp();                          // ... and those of the other lanes are visible
        }

        // K.Q: group lane/4 takes rows 4 (lane/4) + i0; lane tk keeps row 4 (lane/4) + tk = lane
        float s_own[G];
        float mx[G];
#pragma unroll
        for (int h = 0; h < G; ++h) {
            mx[h] = KQ_max[h];
            s_own[h] = 0.0f;
        }
        const char * K_row = K + (int64_t) (kw + (lane & ~(NK - 1)))*nb11;  // then one row stride per step
#pragma unroll
        for (int i0 = 0; i0 < NK; ++i0, K_row += nb11) {
            const int row = kw + (lane & ~(NK - 1)) + i0;
            int   v[NI];
            float dk[NB];
            if constexpr (stage) {
                const int r = (lane & ~(NK - 1)) + i0;
                ggml_cuda_turbo_fa_dec_K<type_K, D>(sK + ggml_cuda_turbo_fa_dec_slot_of(r)*SK + ((K_lo + (uint32_t) row*(uint32_t) nb11) & 15), tk, v, dk);
            } else {
                ggml_cuda_turbo_fa_dec_K<type_K, D>(K_row, tk, v, dk);
            }
            const float mval = maskh ? __half2float(maskh[row]) : 0.0f;
#pragma unroll
            for (int h = 0; h < G; ++h) {
                float sum = 0.0f;
#pragma unroll
                for (int m = 0; m < NB; ++m) {
                    const int sa = ggml_cuda_dp4a(v[4*m + 1], Qi[h][4*m + 1], ggml_cuda_dp4a(v[4*m + 0], Qi[h][4*m + 0], 0));
                    const int sb = ggml_cuda_dp4a(v[4*m + 3], Qi[h][4*m + 3], ggml_cuda_dp4a(v[4*m + 2], Qi[h][4*m + 2], 0));
                    sum += dk[m] * (Qd[h][2*m] * (float) sa + Qd[h][2*m + 1] * (float) sb);
                }
                sum *= ggml_cuda_turbo_i8_step<type_K>();
                sum = warp_reduce_sum<NK>(sum);
                sum += slope[h]*mval;
                mx[h] = fmaxf(mx[h], sum + FATTN_KQ_MAX_OFFSET);
                if (tk == i0) {
                    s_own[h] = sum;
                }
            }
        }
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
            for (int off = NK; off < WARP_SIZE; off <<= 1) {
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFF, mx[h], off, WARP_SIZE));
            }
            const float rescale = expf(KQ_max[h] - mx[h]);
            KQ_max[h] = mx[h];
            const float p = expf(s_own[h] - KQ_max[h]);
            KQ_sum[h] = KQ_sum[h]*rescale + p;
            sh_p[warp][lane][h] = __float2half2_rn(p);
            if (rescale != 1.0f) {  // warp-uniform; on a long cache the running max rarely moves
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    VKQ[h][k] *= rescale;
                }
            }
        }
        __syncwarp();

        // V: lane cv of row rv, elements o..o+3 and o+32..o+35 of block cv/8 (o = 4 (cv % 8))
        half2 part[G][4];
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                part[h][k] = make_half2(0.0f, 0.0f);
            }
        }
        const char * V_row = V + (int64_t) (kw + rv)*nb21 + (cv/8)*sizeof(typename ggml_cuda_turbo_traits<type_V>::block);
        const int V_step = VR*nb21;  // VR rows: a 64-bit add per step, not the row's address from scratch
#pragma unroll
        for (int r0 = 0; r0 < WARP_SIZE; r0 += VR, V_row += V_step) {
            const int r = r0 + rv;
            const char * V_src = V_row;
            if constexpr (stage) {
                V_src = sV + ggml_cuda_turbo_fa_dec_slot_of(r)*SV + ((V_lo + (uint32_t) (kw + r)*(uint32_t) nb21) & 15) +
                    (cv/8)*sizeof(typename ggml_cuda_turbo_traits<type_V>::block);
            }
            const typename ggml_cuda_turbo_traits<type_V>::block * b = (const typename ggml_cuda_turbo_traits<type_V>::block *) V_src;
            uint32_t sa, sb;
            ggml_cuda_turbo_fa_dec_V_sel<type_V>(b, cv, sa, sb);
            const half2 d2 = __half2half2(b->d);
            half2 c[4];
            ggml_cuda_turbo_fa_dec_V_c<type_V>(sa, c[0], c[1]);
            ggml_cuda_turbo_fa_dec_V_c<type_V>(sb, c[2], c[3]);
            __align__(16) half2 w[G];
            if constexpr (G == 4) {
                ggml_cuda_memcpy_1<16>(w, &sh_p[warp][r][0]);
            } else {
#pragma unroll
                for (int h = 0; h < G; ++h) {
                    w[h] = sh_p[warp][r][h];
                }
            }
#pragma unroll
            for (int h = 0; h < G; ++h) {
                const half2 wd = w[h]*d2;
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    part[h][k] = __hfma2(wd, c[k], part[h][k]);
                }
            }
        }
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float2 f = __half22float2(part[h][k]);
                VKQ[h][2*k + 0] += f.x;
                VKQ[h][2*k + 1] += f.y;
            }
        }
        __syncwarp();  // sh_p (and with VAR >= 2 this tile's buffer) is rewritten by the next tile
        buf ^= 1;
    }

    if (sinks_ptr && blockIdx.y == 0 && warp == 0) {  // one warp counts each head's sink once
#pragma unroll
        for (int h = 0; h < G; ++h) {
            const float sink = ((const float *) sinks_ptr)[head0 + h];
            const float kqmax_new = fmaxf(sink, KQ_max[h]);
            const float rescale = expf(KQ_max[h] - kqmax_new);
            KQ_max[h] = kqmax_new;
            KQ_sum[h] = KQ_sum[h]*rescale + (lane == 0 ? expf(sink - KQ_max[h]) : 0.0f);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                VKQ[h][k] *= rescale;
            }
        }
    }

    // merge the rows of one warp (lanes with the same cv), then the warps
#pragma unroll
    for (int h = 0; h < G; ++h) {
        KQ_sum[h] = warp_reduce_sum(KQ_sum[h]);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
#pragma unroll
            for (int off = NV; off < WARP_SIZE; off <<= 1) {
                VKQ[h][k] += __shfl_xor_sync(0xFFFFFFFF, VKQ[h][k], off, WARP_SIZE);
            }
        }
        if (lane == 0) {
            sh_max[h][warp] = KQ_max[h];
        }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < G; ++h) {
        float gmax = sh_max[h][0];
#pragma unroll
        for (int w = 1; w < nwarps; ++w) {
            gmax = fmaxf(gmax, sh_max[h][w]);
        }
        const float f = expf(KQ_max[h] - gmax);
        if (lane == 0) {
            sh_sum[h][warp] = KQ_sum[h]*f;
        }
        if (rv == 0) {
            const int e = (cv/8)*64 + 4*(cv % 8);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                sh_acc[warp][h][e + k]      = VKQ[h][k]*f;
                sh_acc[warp][h][e + 32 + k] = VKQ[h][4 + k]*f;
            }
        }
    }
    __syncthreads();

    ggml_cuda_turbo_fa_dec_write<D, G, nwarps>(sh_sum, sh_max, sh_acc, dst_ptr, dst_meta_ptr, sequence*int(ne01.z)*ne02 + head0, tid);
#else
    GGML_UNUSED_VARS(Q_ptr, K_ptr, V_ptr, mask_ptr, sinks_ptr, KV_max_ptr, dst_ptr, dst_meta_ptr, scale,
        max_bias, m0, m1, n_head_log2, logit_softcap,
        ne00, ne01, ne02, ne03,
              nb01, nb02, nb03,
        ne10, ne11, ne12, ne13,
              nb11, nb12, nb13,
              nb21, nb22, nb23,
              ne31, ne32, ne33,
              nb31, nb32, nb33);
    NO_DEVICE_CODE;
#endif
}

#include "turbo-fattn-mma.cuh"

#ifndef GGML_CUDA_TURBO_HOST_CHECK
// 0: the vector kernel; 1..ggml_cuda_turbo_fa_dec_nvariants: this kernel's variant (a decimal number)
static int ggml_cuda_turbo_fa_dec_env() {
    static const int var = [] {
        const char * s = getenv("GGML_CUDA_TURBO_FA_DEC");
        if (s == nullptr || *s == '\0') {
            return GGML_CUDA_TURBO_FA_DEC_DEFAULT;
        }
        char * end = nullptr;
        const long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 0 && v <= ggml_cuda_turbo_fa_dec_nvariants) {
            return (int) v;
        }
        GGML_LOG_ERROR("%s: GGML_CUDA_TURBO_FA_DEC=%s is not one of 0..%d; not applied (using %d)\n", __func__, s,
            ggml_cuda_turbo_fa_dec_nvariants, GGML_CUDA_TURBO_FA_DEC_DEFAULT);
        return GGML_CUDA_TURBO_FA_DEC_DEFAULT;
    }();
    return var;
}

// the staged variants copy a row from the 16-byte aligned address below it: its start must be a
// multiple of ggml_cuda_turbo_fa_dec_row_align (it is in the KV cache and in test-backend-ops);
// otherwise variant 1 runs
template <int D, ggml_type type>
static bool ggml_cuda_turbo_fa_dec_stage_ok(const ggml_tensor * t) {
    constexpr size_t a = ggml_cuda_turbo_fa_dec_row_align<type, D>();
    return ((uintptr_t) t->data % a) == 0 && t->nb[1] % a == 0 && t->nb[2] % a == 0 && t->nb[3] % a == 0;
}

template <int D, ggml_type type_K, ggml_type type_V, int VAR>
static void ggml_cuda_turbo_fa_dec_launch(ggml_backend_cuda_context & ctx, ggml_tensor * dst, const int G) {
    constexpr int nwarps = ggml_cuda_turbo_fa_dec_nwarps;
    constexpr int T      = ggml_cuda_turbo_fa_dec_rows;
    switch (G) {
        case 4: launch_fattn<D, 1, 4>(ctx, dst, flash_attn_ext_turbo_dec<D, 4, type_K, type_V, VAR>, nwarps, 0, T, false, false, false, false); break;
        case 2: launch_fattn<D, 1, 2>(ctx, dst, flash_attn_ext_turbo_dec<D, 2, type_K, type_V, VAR>, nwarps, 0, T, false, false, false, false); break;
        default: launch_fattn<D, 1, 1>(ctx, dst, flash_attn_ext_turbo_dec<D, 1, type_K, type_V, VAR>, nwarps, 0, T, false, false, false, false); break;
    }
}

// Heads per block G: the largest of 4, 2 that divides the gqa ratio and still gives a full wave
// of blocks (Q heads / G x sequences x KV tiles of 128 >= nsm x resident blocks per SM), else 1:
// a short cache (one sequence at small depth) leaves the GPU nearly empty whatever G, and the
// call then takes one block's latency, which grows with G (session 9's rule for the vector
// kernel, docs/CUDA.md). GGML_CUDA_TURBO_FA_GQA=N (read by ggml_cuda_turbo_fa_gqa_env) forces
// the largest G <= N that divides the ratio, whatever the grid.
static inline int ggml_cuda_turbo_fa_dec_heads(const int D, const ggml_tensor * dst, const int VAR) {
    const ggml_tensor * Q = dst->src[0];
    const ggml_tensor * K = dst->src[1];
    const int gqa_ratio = (int) (Q->ne[2] / K->ne[2]);
    const int env       = ggml_cuda_turbo_fa_gqa_env();
    const int64_t ntiles_KV = (K->ne[1] + ggml_cuda_turbo_fa_dec_rows - 1) / ggml_cuda_turbo_fa_dec_rows;
    const int64_t nsm       = ggml_cuda_info().devices[ggml_cuda_get_device()].nsm;
    for (int G = 4; G > 1; G /= 2) {
        if (gqa_ratio % G != 0 || (env > 0 && G > env)) {
            continue;
        }
        const int64_t blocks = (Q->ne[2] / G) * Q->ne[3] * ntiles_KV;
        if (env > 0 || blocks >= nsm * ggml_cuda_turbo_fa_dec_min_blocks(D, G, VAR)) {
            return G;
        }
    }
    return 1;
}

// whether the tensor-core kernel can read tensor t's rows: as 4-byte words at hd 128 and 256 (turbo4 rows of 128 values
// are 68 bytes, so the cache's start 4-byte aligned), 16-byte loads for f16 K, 2-byte loads for turbo rows at hd 64
// (34, 26, 18 bytes: every other head of the cache starts 2 bytes past a word); and sm_80's mma
static bool ggml_cuda_turbo_fa_mma_ok(const ggml_tensor * t) {
    const size_t a = t->type == GGML_TYPE_F16 ? 16 : t->ne[0] == 64 && ggml_cuda_type_is_turbo(t->type) ? 2 : 4;
    return ampere_mma_available(ggml_cuda_info().devices[ggml_cuda_get_device()].cc) &&
        ((uintptr_t) t->data % a) == 0 && t->nb[1] % a == 0 && t->nb[2] % a == 0 && t->nb[3] % a == 0;
}

// Heads per block of the tensor-core kernel: the largest of 8, 4, 2 that divides the gqa ratio
// and still gives a full wave (as ggml_cuda_turbo_fa_dec_heads; the mma's 8 columns cost the
// same for any G, so only the grid decides), else 1; GGML_CUDA_TURBO_FA_GQA=N forces G <= N (and
// the whole group for a ratio of 3, 5, 6 or 7 <= N).
static inline int ggml_cuda_turbo_fa_mma_heads(const ggml_tensor * dst, const int min_blocks) {
    const ggml_tensor * Q = dst->src[0];
    const ggml_tensor * K = dst->src[1];
    const int gqa_ratio = (int) (Q->ne[2] / K->ne[2]);
    const int env       = ggml_cuda_turbo_fa_gqa_env();
    const int64_t ntiles_KV = (K->ne[1] + ggml_cuda_turbo_fa_mma_rows - 1) / ggml_cuda_turbo_fa_mma_rows;
    const int64_t nsm       = ggml_cuda_info().devices[ggml_cuda_get_device()].nsm;
    // a ratio of 3, 5, 6 or 7 (Qwen2.5: 7 at 0.5B and 7B, 6 at 1.5B, 5 at 14B/32B): the G = 8 kernel takes
    // the whole group (its 8 columns, ratio of them used), so each K/V row is read once, not once per
    // power-of-two part of the group (G = 1 for 7: seven reads; session 14's Qwen2.5-7B shape). Whatever
    // the grid: measured on the H200 (session 15, Qwen2.5-7B shape, 4 K/V heads) it beats the wave rule's
    // G = 1 where the grid is short too (turbo3 tg64 @ d16384 209.74 -> 265.34 t/s, d0 303.97 -> 306.40).
    // GGML_CUDA_TURBO_FA_GQA=N below the ratio leaves it to the loop below.
    if (gqa_ratio < 8 && (gqa_ratio & (gqa_ratio - 1)) != 0 && (env == 0 || env >= gqa_ratio)) {
        return 8;
    }
    for (int G = 8; G > 1; G /= 2) {
        if (gqa_ratio % G != 0 || (env > 0 && G > env)) {
            continue;
        }
        if (env > 0 || (Q->ne[2] / G) * Q->ne[3] * ntiles_KV >= nsm * min_blocks) {  // the kernel's resident blocks per SM
            return G;
        }
    }
    return 1;
}

template <int D, ggml_type type_K, ggml_type type_V, bool stage, int min_blocks, bool early_v = false, bool next_k = false, bool v_i8 = false,
          bool aw = false, int s7 = 0, bool k_first = false, bool t3 = false, bool t2 = false>
static void ggml_cuda_turbo_fa_mma_launch(ggml_backend_cuda_context & ctx, ggml_tensor * dst, const int G) {
    constexpr int nwarps = ggml_cuda_turbo_fa_mma_nwarps;
    constexpr int T      = ggml_cuda_turbo_fa_mma_rows;
    switch (G) {
        case 8: launch_fattn<D, 1, 8>(ctx, dst, flash_attn_ext_turbo_mma<D, 8, type_K, type_V, stage, min_blocks, early_v, next_k, v_i8, aw, s7, k_first, t3, t2>, nwarps, 0, T, false, false, false, false); break;
        case 4: launch_fattn<D, 1, 4>(ctx, dst, flash_attn_ext_turbo_mma<D, 4, type_K, type_V, stage, min_blocks, early_v, next_k, v_i8, aw, s7, k_first, t3, t2>, nwarps, 0, T, false, false, false, false); break;
        case 2: launch_fattn<D, 1, 2>(ctx, dst, flash_attn_ext_turbo_mma<D, 2, type_K, type_V, stage, min_blocks, early_v, next_k, v_i8, aw, s7, k_first, t3, t2>, nwarps, 0, T, false, false, false, false); break;
        default: launch_fattn<D, 1, 1>(ctx, dst, flash_attn_ext_turbo_mma<D, 1, type_K, type_V, stage, min_blocks, early_v, next_k, v_i8, aw, s7, k_first, t3, t2>, nwarps, 0, T, false, false, false, false); break;
    }
}

// the tensor-core kernel with turbo3 (t3) and turbo2 (t2) read as index words where asked and the pair has them
template <int D, ggml_type type_K, ggml_type type_V, int min_blocks>
static void ggml_cuda_turbo_fa_mma_launch_words(ggml_backend_cuda_context & ctx, ggml_tensor * dst, const int G, const bool t3, const bool t2) {
    constexpr bool h3 = ggml_cuda_turbo_fa_t3(type_K, type_V);
    constexpr bool h2 = ggml_cuda_turbo_fa_t2(type_K, type_V);
    if (t3 && h3 && t2 && h2) {
        if constexpr (h3 && h2) {
            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, min_blocks, false, false, true, false, 0, false, true, true>(ctx, dst, G);
        }
    } else if (t3 && h3) {
        if constexpr (h3) {
            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, min_blocks, false, false, true, false, 0, false, true, false>(ctx, dst, G);
        }
    } else if (t2 && h2) {
        if constexpr (h2) {
            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, min_blocks, false, false, true, false, 0, false, false, true>(ctx, dst, G);
        }
    } else {
        ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, min_blocks, false, false, true>(ctx, dst, G);
    }
}

// true: dst computed by this kernel; false: not taken (switch off or a shape it does not cover)
template <int D, ggml_type type_K, ggml_type type_V>
static bool ggml_cuda_turbo_fa_dec(ggml_backend_cuda_context & ctx, ggml_tensor * dst) {
    static_assert(ggml_cuda_turbo_fa_dec_supported(D, type_K, type_V), "shape");
    const ggml_tensor * Q = dst->src[0];
    const ggml_tensor * K = dst->src[1];
    const ggml_tensor * V = dst->src[2];
    float logit_softcap;
    memcpy(&logit_softcap, (const float *) dst->op_params + 2, sizeof(float));
#ifdef GGML_USE_HIP
    GGML_UNUSED_VARS(ctx, dst, Q, K, V);
    return false;
#else
    if (!fast_fp16_available(ggml_cuda_info().devices[ggml_cuda_get_device()].cc)) {
        return false;
    }
    int var = ggml_cuda_turbo_fa_dec_env();
    if (var == 0 || Q->ne[1] != 1 || logit_softcap != 0.0f || K->ne[0] != D || V->ne[0] != D ||
            K->ne[2] <= 0 || Q->ne[2] % K->ne[2] != 0 || K->ne[1] % ggml_cuda_turbo_fa_dec_rows != 0) {
        return false;
    }
    if constexpr (D == 64) {  // the tensor-core kernel at hd 64 (variant 18; 19 with turbo3's words): q8_0 and f16 K from variant 4
        if (var != 18 && var != 19 && var != 20) {  // on (1..3: the vector kernel); turbo K only when asked (variant 1 otherwise; 2, 3 as asked)
            if constexpr (!ggml_cuda_type_is_turbo(type_K)) {
                if (var < 4) {
                    return false;
                }
            } else {
                var = var >= 4 ? 1 : var;
            }
        }
    }
    if (var >= 4) {  // the tensor-core kernel where it covers the shape, else variant 1
        if constexpr (ggml_cuda_turbo_fa_mma_supported(D, type_K, type_V)) {
            if (ggml_cuda_turbo_fa_mma_ok(K) && ggml_cuda_turbo_fa_mma_ok(V)) {
                if constexpr (D == 64) {  // variant 18: rows read in their tile, V as int8 centroids, 4 blocks per SM; turbo3 as index
                    // words but with 18 (19; turbo K: only when asked, above), turbo2 as index words but with 18 and 19 (20)
                    ggml_cuda_turbo_fa_mma_launch_words<D, type_K, type_V, 4>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 4),
                        ggml_cuda_turbo_fa_t3_words(D, !ggml_cuda_type_is_turbo(type_K), var), ggml_cuda_turbo_fa_t2_words(var));
                } else if constexpr (type_K == GGML_TYPE_Q8_0 || type_K == GGML_TYPE_F16) {  // q8_0 and f16 K (session 30): V as int8 centroids; turbo4 V's words loaded before K.Q
                    if constexpr (D == 256) {  // variant 16 (session 31): V's words read in P.V (registers: O holds 16 m-tiles), 2 blocks per SM
                        ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, false, false, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                    } else if (var == 10) {  // V's words read in P.V, 3 blocks per SM
                        ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 3, false, false, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 3));
                    } else if ((ggml_cuda_turbo_fa_t3_words(D, true, var) && type_V == GGML_TYPE_TURBO3_0) ||
                               (ggml_cuda_turbo_fa_t2_words(var) && type_V == GGML_TYPE_TURBO2_0)) {
                        // turbo3 V as index words (19; 16: without, session 30's code), turbo2 V (20)
                        ggml_cuda_turbo_fa_mma_launch_words<D, type_K, type_V, 2>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2), true,
                            ggml_cuda_turbo_fa_t2_words(var));
                    } else if (var != 16 && type_K == GGML_TYPE_Q8_0 && type_V == GGML_TYPE_TURBO4_0) {  // variant 17 (session 31): q8_0's and turbo4's
                        // aligned words, 3 blocks per SM (16: session 30's code, below, for A/B runs)
                        if constexpr (type_K == GGML_TYPE_Q8_0 && type_V == GGML_TYPE_TURBO4_0) {
                            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 3, true, false, true, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 3));
                        }
                    } else {
                        ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, type_V == GGML_TYPE_TURBO4_0, false, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                    }
                } else if constexpr (D == 256 && type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {  // variant 15 for every variant
                    // from 4 (session 30: FA alone 31.5 -> 17.7 us on an H100)
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, false, true, true, 3>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                } else if constexpr (D == 256) {  // the other turbo pairs (variant 21): turbo3 and turbo2 as index words, V's words read
                    if (var != 21 && ggml_cuda_turbo_fa_t2(type_K, type_V)) {  // in P.V, 2 blocks per SM; pairs with turbo2 only when
                        return false;                                          // asked (the vector kernel otherwise; 21 above)
                    }
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, false, false, true, false, 0, false, ggml_cuda_turbo_fa_t3(type_K, type_V),
                        ggml_cuda_turbo_fa_t2(type_K, type_V)>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                } else if (var == 5) {
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, true, 3>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 3));
                } else if ((ggml_cuda_turbo_fa_t3_words(D, false, var) && ggml_cuda_turbo_fa_t3(type_K, type_V)) ||
                           (ggml_cuda_turbo_fa_t2_words(var) && ggml_cuda_turbo_fa_t2(type_K, type_V))) {
                    // turbo3 K or V as index words (19): 10 with them (6 gives these pairs' code before session 31); turbo2 (20)
                    ggml_cuda_turbo_fa_mma_launch_words<D, type_K, type_V, 4>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 4), true,
                        ggml_cuda_turbo_fa_t2_words(var));
                } else if (var >= 12 && type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {
                    if constexpr (type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {
                        if (var == 15) {  // 12 with K read in its tile, not a tile ahead (hd 256's code)
                            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, false, true, true, 3>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                        } else if (var == 14) {  // 12 with the first tile's K words loaded before Q's
                            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, true, true, true, 3, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                        } else if (var == 12) {
                            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, true, true, true, 3>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                        } else if (var == 13) {
                            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, true, true, true, 1>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                        } else {  // 16 on: variants of other shapes; this one's default, 14
                            ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, true, true, true, 3, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                        }
                    }
                } else if (var == 11 && type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {
                    if constexpr (type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {
                        ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, true, true, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                    }
                } else if (var == 9 && type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {
                    if constexpr (type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {  // (instantiated for this pair only)
                        ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, true, true, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                    }
                } else if (var == 8 && type_K == GGML_TYPE_TURBO4_0 && type_V == GGML_TYPE_TURBO4_0) {
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, type_V == GGML_TYPE_TURBO4_0, type_K == GGML_TYPE_TURBO4_0>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                } else if (var == 7 && type_V == GGML_TYPE_TURBO4_0) {
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 2, type_V == GGML_TYPE_TURBO4_0>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 2));
                } else if (var == 10) {  // 6 with int8 V, every pair
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 4, false, false, true>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 4));
                } else if (var == 6 || var == 8 || var == 9 || var >= 11) {  // 8, 9 and 11 to 15 for the other pairs: variant 6 (4 blocks per SM), their fastest (session 13)
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 4>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 4));
                } else {
                    ggml_cuda_turbo_fa_mma_launch<D, type_K, type_V, false, 3>(ctx, dst, ggml_cuda_turbo_fa_mma_heads(dst, 3));
                }
                return true;
            }
        }
        var = 1;
    }
    if constexpr (D == 256 || !ggml_cuda_type_is_turbo(type_K)) {  // variants 1..3 cover turbo K at hd 64 and 128: upstream's vector kernel (turbo instances)
        return false;
    } else {
        if (var >= 2 && !(ggml_cuda_turbo_fa_dec_stage_ok<D, type_K>(K) && ggml_cuda_turbo_fa_dec_stage_ok<D, type_V>(V))) {
            var = 1;
        }
        const int G = ggml_cuda_turbo_fa_dec_heads(D, dst, var);
        switch (var) {
            case 3:  ggml_cuda_turbo_fa_dec_launch<D, type_K, type_V, 3>(ctx, dst, G); break;
            case 2:  ggml_cuda_turbo_fa_dec_launch<D, type_K, type_V, 2>(ctx, dst, G); break;
            default: ggml_cuda_turbo_fa_dec_launch<D, type_K, type_V, 1>(ctx, dst, G); break;
        }
        return true;
    }
#endif // GGML_USE_HIP
}
#endif // GGML_CUDA_TURBO_HOST_CHECK
