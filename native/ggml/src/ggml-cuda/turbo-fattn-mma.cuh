// tqgguf: flash-attention decode for turbo K and V on tensor cores (mma.sync), one query per
// sequence: variants 4..21 of GGML_CUDA_TURBO_FA_DEC (turbo-fattn-dec.cuh lists them and which is the default
// where, includes this file and dispatches to it; shapes it does not cover take variant 1 or the vector kernel).
//
// Why: variant 1 decodes each K/V byte once for the G Q heads of a K/V head, then multiplies on
// the CUDA cores (G dp4a chains per K word, G x 4 HFMA2 per 8 V values): 0.49 warp instructions
// per KV byte, issue-bound at 22 % of the HBM roofline (docs/CUDA.md, session 11). Here the
// products go to the tensor cores and only the decode stays on the CUDA cores:
//
//   K.Q   mma m16n8k32 s8 (S = K Q^T): A = 16 K rows x 32 dims as int8 centroids (the vector
//         kernel's int8 table, round(c 127 / max|c|)), B = 32 dims x 8 Q heads as int8 (Q
//         quantized per 64 dims = per turbo block, in the kernel), C = int32 per (row, head).
//         The dims of a k-step are permuted so that one 4-byte word of turbo4 indices is one
//         A register pair: qs bytes o..o+3 hold elements o..o+3 (low nibbles) and o+32..o+35
//         (high nibbles); the low 16 bits of the word, as a PRMT selector, give the int8
//         centroids of elements (o, o+32, o+1, o+33), the high 16 bits (o+2, o+34, o+3, o+35).
//         Q's B registers are built once with the same order.
//   P.V   mma m16n8k16 f16 (O^T = V^T P^T): A = 16 dims x 16 KV rows as fp16 centroids (the
//         vector kernel's fp16 byte planes), B = 16 KV rows x 8 heads: the softmax weights
//         times the V block scale (half2), C = fp32 per (dim, head). A half2 of A holds one dim
//         of two consecutive rows, so the indices of rows 2t and 2t+1 are interleaved nibble by
//         nibble into one selector word (two LOP3) and one lookup serves both rows.
//   S -> P the int32 C of K.Q holds rows (g, g+8) x heads (2t, 2t+1) per lane; after the scale,
//         mask, running max and exp, the fp16 weights of 8 rows x 8 heads are transposed in
//         registers by movmatrix into the B layout of P.V (heads by lane group).
//
// A block is (sequence, K/V head, KV split) with G <= 8 Q heads (the 8 columns of both mma; the
// columns beyond G are zeros; with G = 8 and a GQA ratio of 3, 5, 6 or 7 the block takes that
// ratio's heads, the whole group of its K/V head), 4 warps of 32 KV rows per tile; per warp and tile: 8 int8 mma,
// 16 fp16 mma, 4 movmatrix. The split over gridDim.y and its merge are upstream's launch_fattn
// and combine kernel, as for variant 1.
//
// turbo3 and turbo2 (and mixed pairs) take the same path. With t3 / t2 (variants 19-21; turbo3's by default since
// session 31) their rows are read as index words in turbo4's layout (ggml_cuda_turbo_fa_mma_t3_words, _t2_words), so
// the code above serves them; without, with the decode kernel's index code: K rows through ggml_cuda_turbo_fa_dec_K
// (plain element order, Q's B registers likewise), V rows through ggml_cuda_turbo_fa_dec_V_sel, each row looked up
// alone and the pairs formed after (their 8- and 4-entry tables are one PRMT per 4 values).
//
// q8_0 K (session 30): its int8 values go to K.Q's A as stored (no table), with one C accumulator per 32-dim
// k-step, since each q8_0 block has its own scale. f16 K: K.Q in the fp16 mma (m16n8k16) against Q as fp16, 8 k-steps,
// C as the fp32 score. Both with any turbo V, by V's code above.
//
// Covered: head dims 64, 128 and 256, every turbo K, q8_0 K and f16 K with every turbo V (hd 256: turbo4/turbo4 by
// variant 15, q8_0 / f16 K by 16, the other turbo pairs by 21); no logit softcap. Rows 4-byte aligned at hd 128 and
// 256 (16 for f16 K; the host checks the strides; turbo rows of 128 values are 68, 52 and 36 bytes, q8_0's 136, f16's
// 256, so the cache's rows are); at hd 64 a turbo row is one block at a 2-byte aligned start, read 2 bytes at a time
// (variant 18). Needs the int8/fp16 mma of sm_80+ (ampere_mma_available on the host).
#pragma once

// (ggml_cuda_turbo_fa_mma_supported, the shapes this kernel covers, is in turbo-fattn-dec.cuh: the decode kernels'
// own list is built from it)

// a K row's blocks: a turbo block of 64 values, or q8_0's of 32 (an fp16 d, then 32 int8 values: 34 bytes, as turbo4's)
template <ggml_type type> struct ggml_cuda_turbo_fa_mma_kb {
    typedef typename ggml_cuda_turbo_traits<type>::block block;
    static constexpr int qk = 64;
};
template <> struct ggml_cuda_turbo_fa_mma_kb<GGML_TYPE_Q8_0> {
    typedef block_q8_0 block;
    static constexpr int qk = QK8_0;
};
template <> struct ggml_cuda_turbo_fa_mma_kb<GGML_TYPE_F16> {
    typedef half block;
    static constexpr int qk = 1;
};
// words of a turbo4 row of 128 values (two 34-byte blocks: 17): the hd-256 row's second half starts this many words on
static constexpr int ggml_cuda_turbo_fa_mma_half_words = 2*(int) sizeof(ggml_cuda_turbo_traits<GGML_TYPE_TURBO4_0>::block)/4;

static constexpr int ggml_cuda_turbo_fa_mma_nwarps = 4;
static constexpr int ggml_cuda_turbo_fa_mma_rows   = ggml_cuda_turbo_fa_mma_nwarps*32;  // KV rows per tile (4 warps x 32)

#ifndef GGML_CUDA_TURBO_HOST_CHECK  // the host emulation (tests/cuda_host/fa_dec_emul.cpp) defines these four
// D (16x8 s32) += A (16x32 s8, row) * B (32x8 s8, col); fragments as in the PTX ISA for m16n8k32
static __device__ __forceinline__ void ggml_cuda_turbo_mma_s8(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef AMPERE_MMA_AVAILABLE
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    GGML_UNUSED_VARS(c, a, b);
    NO_DEVICE_CODE;
#endif
}
// D (16x8 f32) += A (16x16 f16, row) * B (16x8 f16, col); m16n8k16
static __device__ __forceinline__ void ggml_cuda_turbo_mma_f16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef AMPERE_MMA_AVAILABLE
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    GGML_UNUSED_VARS(c, a, b);
    NO_DEVICE_CODE;
#endif
}
// transpose of an 8x8 b16 matrix held one row pair per lane (lane 4r + c: row r, columns 2c, 2c+1)
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_movmatrix(const uint32_t x) {
#ifdef AMPERE_MMA_AVAILABLE
    uint32_t r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
    return r;
#else
    GGML_UNUSED(x);
    NO_DEVICE_CODE;
    return 0;
#endif
}
// prmt.b32 in its default mode (PTX ISA, "prmt"): byte n of the result is byte (c_n & 7) of the 8 bytes
// b:a (a = bytes 0..3), c_n = nibble n of c's low 16 bits; where c_n & 8 it is that byte's sign bit
// replicated (0x00 or 0xFF) instead. __byte_perm defines only c_n & 7, so nvcc masks the selector with
// 0x7777 first (one LOP3 per lookup); ggml_cuda_turbo_fa_mma_lookup7 uses the sign mode.
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_prmt(const uint32_t a, const uint32_t b, const uint32_t c) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#endif // GGML_CUDA_TURBO_HOST_CHECK

// A byte table held in registers (t[0..3]: entries 0..15) and its lookup by the 4 nibbles of a
// selector (ggml_cuda_turbo_lookup4). The words are made opaque to the compiler once, before the
// KV loop: as constants it re-creates them from uniform registers before every PRMT (an IMAD per
// word and lookup, 13 % of the loop's instructions in a first build).
// x, as a value the compiler cannot prove uniform (opaque: kept in a vector register, not moved
// from a uniform one before every use); key: a kernel argument whose value it does not know
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_opaque(const uint32_t x, const int key) {
    return x | (key == 0x7FFFFFFF ? threadIdx.x : 0u);
}

template <ggml_type type, int plane>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_table(uint32_t (&t)[4], const int key) {
    constexpr uint32_t t0 = ggml_cuda_turbo_table_word<type, plane>(0);
    constexpr uint32_t t1 = ggml_cuda_turbo_table_word<type, plane>(1);
    constexpr uint32_t t2 = ggml_cuda_turbo_table_word<type, plane>(2);
    constexpr uint32_t t3 = ggml_cuda_turbo_table_word<type, plane>(3);
    t[0] = ggml_cuda_turbo_fa_mma_opaque(t0, key);
    t[1] = ggml_cuda_turbo_fa_mma_opaque(t1, key);
    t[2] = ggml_cuda_turbo_fa_mma_opaque(t2, key);
    t[3] = ggml_cuda_turbo_fa_mma_opaque(t3, key);
}
// byte n of the result = entry (nibble n of sel) of the table; m4 = 0x4444 in a register (the pick
// between the two halves of a 16-entry table is one LOP3 with it)
template <ggml_type type>
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_lookup(const uint32_t sel, const uint32_t (&t)[4], const uint32_t m4) {
    if constexpr (ggml_cuda_turbo_traits<type>::levels == 16) {
        const uint32_t lo = __byte_perm(t[0], t[1], sel);  // entries 0..7 (bit 3 of each nibble is ignored)
        const uint32_t hi = __byte_perm(t[2], t[3], sel);  // entries 8..15
        return __byte_perm(lo, hi, ((sel >> 1) & m4) | 0x3210);
    } else {
        return ggml_cuda_turbo_lookup4<ggml_cuda_turbo_traits<type>::levels>(sel, t[0], t[1], t[2], t[3]);
    }
}

// a lookup of V's index words: turbo3 and turbo2 words (t3, t2: 8 or 4 entries, the nibbles' high bits clear) take one PRMT
// without the mask
template <ggml_type type, bool w3>
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_lookup_w(const uint32_t sel, const uint32_t (&t)[4], const uint32_t m4) {
    if constexpr (w3) {
        return ggml_cuda_turbo_prmt(t[0], t[1], sel);
    } else {
        return ggml_cuda_turbo_fa_mma_lookup<type>(sel, t, m4);
    }
}

// s7 (variant 12): the 16-entry lookup of 7-bit codes (ggml_cuda_turbo_table_word plane 4: t[0..1] =
// entries 0..7, t[2..3] = entries 15..8), nsel = ~sel. For a nibble i < 8 the first PRMT gives entry i
// and the second, whose nibble ~i has bit 3 set, the sign of a byte under 0x80: 0; for i >= 8 the first
// gives 0 (sign mode) and the second byte (15 - i) of t[2..3], entry i. So an OR joins them: 3
// instructions per 4 values (two when nsel is shared) against 6 for ggml_cuda_turbo_fa_mma_lookup (the
// 0x7777 mask, two PRMT, the pick selector's shift and LOP3, the pick). The price is a bit of the
// centroids' precision: a sign-mode byte keeps its msb, so an entry's msb cannot depend on bit 3 of its
// index, and every code must be under 0x80 (q + 64, |q| <= 63, instead of int8's |q| <= 127). With the
// step of least expected error (ggml_cuda_turbo_i8_step<type, 63>) turbo4's 7-bit codes add 0.43 % to the
// quantizer's own MSE, less than the int8 codes at max|c|/127 (0.49 %).
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_lookup7(const uint32_t sel, const uint32_t nsel, const uint32_t (&t)[4]) {
    return ggml_cuda_turbo_prmt(t[0], t[1], sel) | ggml_cuda_turbo_prmt(t[2], t[3], nsel);
}

// v_i8: bytes (r0 e, r1 e, r0 e+1, r1 e+1) of integer centroids q stored + off (128: int8, 64: the 7-bit
// codes) as two half2 A registers, (r0, r1) of element e in a0, of e + 1 in a1: each byte under 0x64
// (x64 = 0x64646464; the fp16 bits 0x64xx are 1024 + xx exactly), then 1024 + off taken off (exact: the
// result is the integer q)
template <int off>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_i8_pairs(const uint32_t b, const uint32_t x64, uint32_t & a0, uint32_t & a1) {
    const uint32_t u0 = __byte_perm(b, x64, 0x4140);
    const uint32_t u1 = __byte_perm(b, x64, 0x4342);
    const half2 h0 = __hsub2(*((const half2 *) &u0), make_half2(1024.0f + off, 1024.0f + off));
    const half2 h1 = __hsub2(*((const half2 *) &u1), make_half2(1024.0f + off, 1024.0f + off));
    a0 = *((const uint32_t *) &h0);
    a1 = *((const uint32_t *) &h1);
}

// O^T's accumulators of this lane's column 2t + hh (both dims of every m-tile) times r: the
// online softmax's rescale when a column's running max moves
template <int NM>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_scale_column(float (&O)[NM][4], const int hh, const float r) {
#pragma unroll
    for (int i = 0; i < NM; ++i) {
        O[i][hh]     *= r;
        O[i][hh + 2] *= r;
    }
}

// the 4-byte word of turbo4 indices at qs offset o (o % 4 == 0, o < 32) of block m of a row whose
// start is 4-byte aligned (W: the row as words): block m starts at byte 34m, its qs at 34m + 2,
// so for even m the word straddles two aligned words. q8_0's blocks have the same 34 bytes (an fp16 d, then qs):
// ggml_cuda_turbo_fa_mma_q8_words reads them with these two functions.
static_assert(sizeof(block_turbo4_0) == 34 && sizeof(block_q8_0) == 34, "34-byte blocks: d, then qs");
template <int m>
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_word4(const uint32_t * W, const int o) {
    constexpr int b = 34*m + 2;  // byte of qs[0]
    if constexpr (b % 4 == 0) {
        return W[(b + o)/4];
    } else {
        return __byte_perm(W[(b + o)/4], W[(b + o)/4 + 1], 0x5432);  // bytes 2, 3 of one word, 0, 1 of the next
    }
}
// the scale d of block m of that row, as fp16 bits in the low half
template <int m>
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_scale4(const uint32_t * W) {
    constexpr int b = 34*m;
    return b % 4 == 0 ? W[b/4] & 0xFFFF : W[b/4] >> 16;
}

// hd 64 (variant 18): a row is one turbo block whose start is only 2-byte aligned (34, 26, 18 bytes: the cache puts head h
// of a cell at h such rows, so every odd head of turbo4 starts 2 bytes past a word). The turbo4 index word at qs offset o
// (o % 4 == 0) of the block at blk, from two 2-byte loads: the same 4 bytes ggml_cuda_turbo_fa_mma_word4 gives at hd 128,
// at any 2-byte aligned start and without reading past the block
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_word2(const char * blk, const int o) {
    const uint16_t * h = (const uint16_t *) (blk + 2 + o);
    return (uint32_t) h[0] | (uint32_t) h[1] << 16;
}

// turbo3 as index words (t3, variant 19). Element 8r + l of a turbo3 block is the 3-bit field r of w_l = qs[l] |
// qs[8 + l] << 8 | qs[16 + l] << 16 (ggml_cuda_turbo_index). For the elements l0 .. l0 + 3 (l0 = 0 or 4) this reads byte
// rows hr and hr + 1 of qs at l0 (bits 8 hr .. 8 hr + 15 of each w_l, as 16-bit lanes) and returns N words, word j holding
// the fields r = (8 hr + sh)/3 + 2j and r + 1 as nibbles: byte k is element l0 + (0, 2, 1, 3)[k], field r in its low
// nibble and r + 1 in its high one, bit 3 of each nibble clear. That is the layout of a turbo4 index word (two elements
// per byte, one per nibble), so K.Q's selectors and P.V's interleaving of two rows serve it as they are, and a lookup in
// an 8-entry table is one PRMT without a mask. sh + 6 N <= 16. a4: qs + 8 hr + l0 known to be 4-byte aligned (else
// two 2-byte loads per row). Per word: 2 shifts, 3 logic ops and an add, where ggml_cuda_turbo3_sel4_rows takes about
// 14 for the same 8 fields.
template <int N>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_t3_words(uint32_t (&x)[N], const char * qs, const int l0, const int hr, const int sh,
        const bool a4) {
    uint32_t q0, q1;
    if (a4) {  // (a constant where the kernel calls it: its loops are unrolled)
        q0 = *((const uint32_t *) (qs + 8*hr + l0));
        q1 = *((const uint32_t *) (qs + 8*hr + 8 + l0));
    } else {
        ggml_cuda_memcpy_1<4, 2>(&q0, qs + 8*hr + l0);
        ggml_cuda_memcpy_1<4, 2>(&q1, qs + 8*hr + 8 + l0);
    }
    const uint32_t lo = __byte_perm(q0, q1, 0x5140) >> sh;  // elements l0, l0 + 1 (16-bit lanes), field r at bit 0 of each
    const uint32_t hi = __byte_perm(q0, q1, 0x7362) >> sh;  // elements l0 + 2, l0 + 3
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const uint32_t u = lo >> (6*j);
        const uint32_t v = hi >> (6*j);
        const uint32_t b = (u & 0x003F003F) | ((v & 0x003F003F) << 8);  // bytes l0, l0 + 2, l0 + 1, l0 + 3: fields r, r + 1 in bits 0..5
        x[j] = b + (b & 0x38383838);                                     // field r + 1 from bits 3..5 to 4..6
    }
}
// the element (of its 64) in byte k of word j of a K row's turbo3 block for lane t: rows h = t/2, h + 1, fields
// r = 4h + 2j (low nibbles) and r + 1 (high), l0 = 4 (t % 2); hi: the word's high nibbles
static __device__ __forceinline__ int ggml_cuda_turbo_fa_mma_t3_elem(const int t, const int j, const int k, const bool hi) {
    return 8*(4*(t/2) + 2*j + hi) + 4*(t % 2) + (k == 1 ? 2 : k == 2 ? 1 : k);
}

// turbo2 as index words (t2, variant 20). Element j of a turbo2 block is the 2-bit field j/16 of qs[j % 16]
// (ggml_cuda_turbo_index): a byte holds elements b, b + 16, b + 32, b + 48. A word of qs masked with 0x33333333 keeps
// fields 0 and 2 of each byte as its two nibbles (bits 2 and 3 of each clear), shifted right by 2 first fields 1 and 3:
// the layout of a turbo4 index word again, 3 instructions per 16 values, and a lookup in the 4-entry table is one PRMT
// without the mask. The 4 bytes of qs at o (o % 2 == 0; two 2-byte loads unless a4): x[0] = fields 0 / 2 of elements
// o .. o + 3 (low / high nibbles), x[1] = fields 1 / 3
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_t2_words(uint32_t (&x)[2], const char * qs, const int o, const bool a4) {
    uint32_t w;
    if (a4) {  // (a constant where the kernel calls it)
        w = *((const uint32_t *) (qs + o));
    } else {
        ggml_cuda_memcpy_1<4, 2>(&w, qs + o);
    }
    x[0] = w & 0x33333333;
    x[1] = (w >> 2) & 0x33333333;
}
// the element (of its 64) in byte k (0..3) of K word j of lane t's turbo2 block (qs bytes 4t ..); hi: the high nibble
static __device__ __forceinline__ int ggml_cuda_turbo_fa_mma_t2_elem(const int t, const int j, const int k, const bool hi) {
    return 4*t + k + 16*j + 32*hi;
}
// a K row's turbo3 or turbo2 block read as index words by lane t (t3 / t2): its words j = 0, 1 (K.Q's k-steps), from
// the block's qs (a4: known 4-byte aligned where the reads are)
template <ggml_type type>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_k_words(uint32_t (&x)[2], const char * qs, const int t, const bool a4) {
    if constexpr (type == GGML_TYPE_TURBO3_0) {
        ggml_cuda_turbo_fa_mma_t3_words<2>(x, qs, 4*(t % 2), t/2, 4*(t/2), a4);  // rows t/2, t/2 + 1; fields 4 (t/2) + 2j, + 1
    } else {
        static_assert(type == GGML_TYPE_TURBO2_0, "turbo3 or turbo2");
        ggml_cuda_turbo_fa_mma_t2_words(x, qs, 4*t, a4);                         // qs bytes 4t .. 4t + 3
    }
}
// the element (of its 64) in byte k of K word j of lane t (ggml_cuda_turbo_fa_mma_k_words); hi: the word's high nibbles
template <ggml_type type>
static __device__ __forceinline__ int ggml_cuda_turbo_fa_mma_k_elem(const int t, const int j, const int k, const bool hi) {
    return type == GGML_TYPE_TURBO3_0 ? ggml_cuda_turbo_fa_mma_t3_elem(t, j, k, hi) : ggml_cuda_turbo_fa_mma_t2_elem(t, j, k, hi);
}

// q8_0 K (hd 128 / 256: 4 / 8 blocks of 32, 136 / 272 bytes, a 4-byte aligned start): K.Q's A registers of lane t for
// the k-step of block b = its int8 values at qs offsets 4t (a0: A columns 4t..4t+3) and 16 + 4t (a1: columns
// 16 + 4t..), as stored, and the block's d
template <int b>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_q8_block(const uint32_t * W, const int t, uint32_t & a0, uint32_t & a1, float & d) {
    a0 = ggml_cuda_turbo_fa_mma_word4<b>(W, 4*t);
    a1 = ggml_cuda_turbo_fa_mma_word4<b>(W, 4*t + 16);
    const uint32_t h = ggml_cuda_turbo_fa_mma_scale4<b>(W);
    d = __half2float(*((const half *) &h));
}
// the A registers and scales of a row's NQ blocks from block b on: a[b][0..1], d[b]
template <int NQ, int b = 0>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_q8_words(const uint32_t * W, const int t, uint32_t (&a)[NQ][2], float (&d)[NQ]) {
    if constexpr (b < NQ) {
        ggml_cuda_turbo_fa_mma_q8_block<b>(W, t, a[b][0], a[b][1], d[b]);
        ggml_cuda_turbo_fa_mma_q8_words<NQ, b + 1>(W, t, a, d);
    }
}
// q8_0 K at hd 128 read as aligned words (variant 17): an odd block's qs start on a word (byte 36 of the row: block 1,
// 104: block 3), an even block's 2 bytes past one (block 0: 2, block 2: 70), as turbo4's block 0. There lane t takes the
// aligned words holding qs bytes 2 + 4t .. (a0) and 18 + 4t .. (a1); lane 3's second word holds qs bytes 30, 31 and the
// next block's d, so one PRMT with the block's first word (d, qs 0, 1; sel = ggml_cuda_turbo_fa_mma_aw_sel(t == 3))
// makes it qs 30, 31, 0, 1 (K.Q's columns then hold the qs bytes ggml_cuda_turbo_fa_mma_qs_pos gives, and Q's B the
// same). The scales come from the words the reads share: 12 loads a row and lane instead of 16, 2 PRMT instead of 4.
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_q8_words_aw(const uint32_t * W, const int t, const uint32_t sel_aw,
        uint32_t (&a)[4][2], float (&d)[4]) {
    const uint32_t * Wt = W + t;
    const uint32_t w0 = W[0], w8 = W[8], w17 = W[17], w25 = W[25];  // d0 | qs0 qs1; qs 30 31 | d1; d2 | qs0 qs1; qs 30 31 | d3
    a[0][0] = Wt[1];
    a[0][1] = __byte_perm(w0, Wt[5], sel_aw);
    a[1][0] = Wt[9];
    a[1][1] = Wt[13];
    a[2][0] = Wt[18];
    a[2][1] = __byte_perm(w17, Wt[22], sel_aw);
    a[3][0] = Wt[26];
    a[3][1] = Wt[30];
    const uint32_t h[4] = { w0 & 0xFFFF, w8 >> 16, w17 & 0xFFFF, w25 >> 16 };
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        d[b] = __half2float(*((const half *) &h[b]));
    }
}
// turbo4 V without the early loads: the index word at qs offset o and the scale (fp16 bits) of each of a row's NB
// blocks from block m on (hd 256: 4 blocks, 136 bytes; the blocks lie one after another as at hd 128)
template <int NB, int m = 0>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_v4_words(const uint32_t * W, const int o, uint32_t (&iw)[NB], uint32_t (&ds)[NB]) {
    if constexpr (m < NB) {
        iw[m] = ggml_cuda_turbo_fa_mma_word4<m>(W, o);
        ds[m] = ggml_cuda_turbo_fa_mma_scale4<m>(W);
        ggml_cuda_turbo_fa_mma_v4_words<NB, m + 1>(W, o, iw, ds);
    }
}

// f16 K (a 16-byte aligned row of 2D bytes): lane t's D/2 bytes, the row's dims (D/4) t .. (D/4) t + D/4 - 1 as D/8
// words (w[i]: dims (D/4) t + 2i, + 1), in 16-byte loads. K.Q's k-step s (16 dims, m16n8k16) takes w[2s] as its A
// columns 2t, 2t + 1 and w[2s + 1] as its columns 8 + 2t, 9 + 2t: the dims (D/4) t + 4s .. + 3, so Q's B registers of
// lane (g, t) for the step are Q's dims (D/4) t + 4s .. + 3 of head g (a dot product does not depend on the order of
// its terms)
template <int D>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_f16_row(uint32_t (&w)[D/8], const char * row, const int t) {
#pragma unroll
    for (int i = 0; i < D/32; ++i) {
#ifdef GGML_CUDA_TURBO_HOST_CHECK
        memcpy(w + 4*i, row + (D/2)*t + 16*i, 16);
#else
        const uint4 v = *((const uint4 *) (row + (D/2)*t + 16*i));
        w[4*i + 0] = v.x;
        w[4*i + 1] = v.y;
        w[4*i + 2] = v.z;
        w[4*i + 3] = v.w;
#endif
    }
}

// The K.Q operands of lane t of a K row (turbo4, hd 128, 4-byte aligned start): the raw words it
// reads (ggml_cuda_turbo_fa_mma_k4_load) and from them the 4 index words and 2 scales
// (ggml_cuda_turbo_fa_mma_k4_unpack). Split so that a variant can load the words of the next tile
// while it computes on this one (next_k, variant 8).
//   aw = false: the index words at qs offsets 4t and 4t + 16 of both blocks, as
//     ggml_cuda_turbo_fa_mma_word4 reads them (block 0's straddle two aligned words), and the two
//     scale words: 8 loads.
//   aw = true (aligned words, variant 11): block 0's qs (row bytes 2..33) are read as the aligned
//     words 1..7 plus the halves of words 0 and 8 that the scale loads bring anyway: lane t's
//     words are W[1 + t] and W[5 + t], and lane 3's second one (W[8]) becomes qs bytes 30, 31, 0, 1
//     by one PRMT with word 0 (ggml_cuda_turbo_fa_mma_aw_sel): 6 loads and 1 PRMT instead of 8
//     and 2. Its word of k-step j then holds qs bytes (2 + 4t + 16j + k) mod 32, k = 0..3, and Q's
//     B registers are built in that order (ggml_cuda_turbo_fa_mma_qs_pos).
template <bool aw> struct ggml_cuda_turbo_fa_mma_k4 { static constexpr int nw = aw ? 6 : 8; };

// the PRMT selector of the aligned-word read (aw) of lane i of a row's block 0 (i = t for K's second
// word, i = g for V's word): x = W[0], y = the lane's loaded word; the last lane's loaded word is
// W[8], whose qs bytes 30, 31 go first, then qs bytes 0, 1 from the top of W[0]
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_fa_mma_aw_sel(const bool last) {
    return last ? 0x3254 : 0x7654;
}
// the qs byte (of its 32-byte block m) at position k of the index word of k-step j of lane t (an even block
// starts 2 bytes past a word: block 0 of each 68-byte half)
template <bool aw>
static __device__ __forceinline__ int ggml_cuda_turbo_fa_mma_qs_pos(const int m, const int j, const int t, const int k) {
    return aw && m % 2 == 0 ? (2 + 4*t + 16*j + k) % 32 : 4*t + 16*j + k;
}

template <bool aw>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_k4_load_half(uint32_t (&r)[ggml_cuda_turbo_fa_mma_k4<aw>::nw], const uint32_t * W, const int t) {
    if constexpr (aw) {
        const uint32_t * Wt = W + t;        // one address per row, the words at immediate offsets from it
        r[0] = Wt[1];                       // block 0, qs bytes 2 + 4t ..
        r[1] = Wt[5];                       // block 0, qs bytes 18 + 4t .. (lane 3: word 8)
        r[2] = Wt[9];                       // block 1 (qs at byte 36), offset 4t
        r[3] = Wt[13];                      // block 1, offset 4t + 16
        r[4] = W[0];                        // d of block 0: low half
        r[5] = W[8];                        // d of block 1 (byte 34): high half
    } else {
        r[0] = W[t];      r[1] = W[t + 1];  // block 0, qs offset 4t (qs start at byte 2: two words)
        r[2] = W[t + 4];  r[3] = W[t + 5];  // block 0, qs offset 4t + 16
        r[4] = W[9 + t];                    // block 1 (qs at byte 36), offset 4t
        r[5] = W[13 + t];                   // block 1, offset 4t + 16
        r[6] = W[0];                        // d of block 0: low half
        r[7] = W[8];                        // d of block 1 (byte 34): high half
    }
}
// a row of NH = hd/128 halves: half h's words from W + 17 h
template <bool aw, int NH>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_k4_load(uint32_t (&r)[NH][ggml_cuda_turbo_fa_mma_k4<aw>::nw], const uint32_t * W, const int t) {
#pragma unroll
    for (int h = 0; h < NH; ++h) {
        ggml_cuda_turbo_fa_mma_k4_load_half<aw>(r[h], W + ggml_cuda_turbo_fa_mma_half_words*h, t);
    }
}
template <bool aw>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_k4_unpack_half(uint32_t (&w)[2][2], float (&d)[2], const uint32_t (&r)[ggml_cuda_turbo_fa_mma_k4<aw>::nw],
        const uint32_t sel_aw) {
    constexpr int nw = ggml_cuda_turbo_fa_mma_k4<aw>::nw;
    if constexpr (aw) {
        w[0][0] = r[0];
        w[0][1] = __byte_perm(r[4], r[1], sel_aw);
    } else {
        w[0][0] = __byte_perm(r[0], r[1], 0x5432);
        w[0][1] = __byte_perm(r[2], r[3], 0x5432);
    }
    w[1][0] = r[nw - 4];
    w[1][1] = r[nw - 3];
    const uint32_t d0 = r[nw - 2] & 0xFFFF;
    const uint32_t d1 = r[nw - 1] >> 16;
    d[0] = __half2float(*((const half *) &d0));
    d[1] = __half2float(*((const half *) &d1));
}
// the index words and scales of the NB = 2 NH blocks of a row (half h: blocks 2h, 2h + 1)
template <bool aw, int NH>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_k4_unpack(uint32_t (&w)[2*NH][2], float (&d)[2*NH], const uint32_t (&r)[NH][ggml_cuda_turbo_fa_mma_k4<aw>::nw],
        const uint32_t sel_aw) {
#pragma unroll
    for (int h = 0; h < NH; ++h) {
        uint32_t wh[2][2];
        float    dh[2];
        ggml_cuda_turbo_fa_mma_k4_unpack_half<aw>(wh, dh, r[h], sel_aw);
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            w[2*h + b][0] = wh[b][0];
            w[2*h + b][1] = wh[b][1];
            d[2*h + b]    = dh[b];
        }
    }
}

// next_k: the K words (ggml_cuda_turbo_fa_mma_k4_load) of this lane's 4 rows of a warp tile,
// K_lane + 16 mt + 8 rr rows (row stride nb11_8/8), and their mask values (0 without a mask);
// row0 = the tile's row of this lane (kw + g); the mask as raw fp16 bits (converted where used, so
// the load is not waited on here)
template <bool aw, int NH>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_next_k(uint32_t (&Kn)[2][2][NH][ggml_cuda_turbo_fa_mma_k4<aw>::nw], uint16_t (&Mn)[2][2],
        const char * K_tile, const int nb11_8, const half * maskh, const int row0, const int t) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            ggml_cuda_turbo_fa_mma_k4_load<aw, NH>(Kn[mt][rr], (const uint32_t *) (K_tile + (2*mt + rr)*nb11_8), t);
            Mn[mt][rr] = maskh ? ((const uint16_t *) maskh)[row0 + 16*mt + 8*rr] : 0;  // fp16 bits (0: +0.0)
        }
    }
}

// Staging (stage = true, variant 5): each warp copies the 32 K and 32 V rows of its NEXT tile into
// shared memory with 16-byte cp.async while it works on the current one, so the decode reads
// shared memory and the loads of a tile never wait on DRAM (variant 4 waits three times per tile:
// K rows 0..15, K rows 16..31, V). Slot r of a warp's buffer holds row r (K: r < 32, V: 32 + r) from
// the 16-byte aligned address below its start: 80 bytes for a 68-byte turbo4 row that starts at a
// multiple of 4 (5 chunks). Lane l copies row l of K and of V.
static constexpr int ggml_cuda_turbo_fa_mma_slot = 80;

template <int row_bytes>
static __device__ __forceinline__ void ggml_cuda_turbo_fa_mma_stage(char * dst, const char * row, const int lane) {
    static_assert(row_bytes + 12 <= ggml_cuda_turbo_fa_mma_slot, "slot");
    const int off = (int) ((uintptr_t) row & 15);
    char * d = dst + lane*ggml_cuda_turbo_fa_mma_slot;
#pragma unroll
    for (int ch = 0; ch < ggml_cuda_turbo_fa_mma_slot/16; ++ch) {
        if (16*ch < off + row_bytes) {  // only the chunks that hold bytes of the row
            ggml_cuda_turbo_fa_dec_cp16(d + 16*ch, row - off + 16*ch);
        }
    }
}

// min_blocks: resident blocks per SM asked of the compiler (3: <= 168 registers, 147-149 used at sm_90;
// 4: <= 128, 126-128 used -- variant 6, 4 bytes spilled at G 8). early_v (turbo4 V, not staged):
// the tile's V words are loaded before its K.Q, so a warp waits on DRAM once per tile instead of
// three times (K rows 0..15, 16..31, V), at the cost of 40 registers (variant 7, at 2 blocks per SM).
// next_k (turbo4 K, not staged; variant 8 with early_v): the K words and mask values of the warp's
// NEXT tile are loaded at the top of this tile, so K.Q never waits on DRAM and V's wait overlaps K.Q:
// a tile's loads are in flight during a whole tile of math (register double-buffering; 32 + 2
// registers more than early_v alone).
// v_i8 (variants 9 and 10): V's centroids as int8 (the K table's values,
// q = round(c 127 / max|c|), stored + 128) instead of fp16 byte planes: one 16-entry lookup per 4
// values instead of two, and the byte becomes an fp16 A value by a PRMT with 0x64 (the fp16 bits
// 0x64xx are 1024 + xx exactly) and one HSUB2 of 1152 (exact: q is an integer < 128); O is scaled
// by the table's step once at the end. The profile of session 16 found the kernel bound by its ALU
// work (the PRMT/LOP3 of the lookups): per 4 turbo4 V values 7.5 ALU instructions instead of 10.5
// (the HSUB2 go to the FMA pipe); turbo3 and turbo2 V (each row looked up alone): 4 per 4 values
// instead of 6. The V centroids then carry K's int8 precision (error <= step/2 =
// max|c|/254, against turbo4's cells of ~0.26 sigma).
// s7 (with aw; bit 0: K, bit 1: V; variant 12: both, 13: K only): the centroids as 7-bit codes, looked up
// by ggml_cuda_turbo_fa_mma_lookup7 (3 ALU instructions per 4 values instead of 6). K's codes are q + 64:
// K.Q's int32 C then holds sum (q + 64) Qi = sum q Qi + 64 sum Qi, so C starts at -64 sum Qi of the
// block's 64 dims and head (Q's int8 sum, from its quantization); V's bias goes with the HSUB2 (1088
// instead of 1152).
// k_first (with next_k; variant 14): the first tile's K words and mask values are loaded right after the
// grid dependency wait, before Q is read and quantized, and whatever KV_max says (a tile below ne11 exists:
// when it lies beyond KV_max the loop does not run and the words go unused), so that Q's load, KV_max's and
// K's are in flight together instead of K's waiting for Q's quantization and its barrier: a call over a short
// cache (a decode at depth 0: one tile per block) waits on memory once before its math instead of twice. The
// same loads and operations, so the same floats.
template <int D, int G, ggml_type type_K, ggml_type type_V, bool stage = false, int min_blocks = 3, bool early_v = false, bool next_k = false,
          bool v_i8 = false, bool aw = false, int s7 = 0, bool k_first = false, bool t3 = false, bool t2 = false>
__launch_bounds__(ggml_cuda_turbo_fa_mma_nwarps*WARP_SIZE, min_blocks)
static __global__ void flash_attn_ext_turbo_mma(
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
#if (defined(AMPERE_MMA_AVAILABLE) && defined(FLASH_ATTN_AVAILABLE)) || defined(GGML_CUDA_TURBO_HOST_CHECK)
    static_assert(ggml_cuda_turbo_fa_mma_supported(D, type_K, type_V), "shape");
    static_assert(G == 1 || G == 2 || G == 4 || G == 8, "heads per block");
    constexpr int nwarps = ggml_cuda_turbo_fa_mma_nwarps;
    constexpr int NB     = D/64;   // turbo blocks per row
    constexpr int T      = ggml_cuda_turbo_fa_mma_rows;
    constexpr int NM     = D/16;   // P.V m-tiles (16 dims each)
    constexpr int NH     = D >= 128 ? D/128 : 1;  // turbo4 rows: 68-byte halves (hd 256: 2; hd 64: a 34-byte row, read by ggml_cuda_turbo_fa_mma_word2)
    typedef typename ggml_cuda_turbo_fa_mma_kb<type_K>::block block_K;
    typedef typename ggml_cuda_turbo_traits<type_V>::block block_V;
    constexpr int RBK = D/ggml_cuda_turbo_fa_mma_kb<type_K>::qk*sizeof(block_K);  // bytes per row
    constexpr int RBV = NB*sizeof(block_V);
    constexpr bool K4 = type_K == GGML_TYPE_TURBO4_0;  // turbo4 K: the interleaved element order (words, above)
    constexpr bool K8 = type_K == GGML_TYPE_Q8_0;      // q8_0 K: its int8 values as A, a scale per 32 dims (per k-step)
    constexpr bool KH = type_K == GGML_TYPE_F16;       // f16 K: K.Q in the fp16 mma, Q as fp16 (no int8 Q, no K scale)
    constexpr int  KB = K8 ? 2 : 1;                    // K scales per 64 dims: K.Q's C accumulators per 64-dim block
    static_assert(!(K8 || KH) || (!stage && !next_k && (!aw || (K8 && D == 128))), "q8_0 and f16 K: rows read in their tile (q8_0 at hd 128: aligned words too)");
    static_assert(D != 64 || (!stage && !early_v && !next_k && !aw && s7 == 0), "hd 64: rows read in their tile, 2 bytes at a time (ggml_cuda_turbo_fa_mma_word2)");
    constexpr bool V4 = type_V == GGML_TYPE_TURBO4_0;  // turbo4 V: two rows' indices interleaved in one word
    constexpr bool K3 = t3 && type_K == GGML_TYPE_TURBO3_0;  // turbo3 as index words (ggml_cuda_turbo_fa_mma_t3_words)
    constexpr bool V3 = t3 && type_V == GGML_TYPE_TURBO3_0;
    constexpr bool K2 = t2 && type_K == GGML_TYPE_TURBO2_0;  // turbo2 as index words (ggml_cuda_turbo_fa_mma_t2_words)
    constexpr bool V2 = t2 && type_V == GGML_TYPE_TURBO2_0;
    constexpr bool VW = V4 || V3 || V2;                        // V as index words, two rows interleaved
    static_assert(!t3 || ((K3 || V3) && !stage && !early_v && !next_k && !aw && s7 == 0), "turbo3 words: rows read in their tile");
    static_assert(!t2 || ((K2 || V2) && !stage && !early_v && !next_k && !aw && s7 == 0), "turbo2 words: rows read in their tile");
    static_assert(!aw || ((K4 || type_K == GGML_TYPE_Q8_0) && V4 && early_v && !stage), "aligned words (ggml_cuda_turbo_fa_mma_k4_load, _q8_words_aw): turbo4 or q8_0 K, turbo4 V, V loaded early");
    static_assert(s7 == 0 || (aw && v_i8), "7-bit codes (ggml_cuda_turbo_fa_mma_lookup7): variant 11's code");
    static_assert(!k_first || next_k, "the first tile's K words early (k_first): the next-tile K registers (next_k)");
    constexpr bool s7K = s7 & 1;
    constexpr bool s7V = s7 & 2;
    constexpr int qmax_K = s7K ? 63 : 127;  // the integer centroids' range (ggml_cuda_turbo_i8_step)
    constexpr int qmax_V = s7V ? 63 : 127;
    constexpr int KNW = ggml_cuda_turbo_fa_mma_k4<aw>::nw;  // K words per row and lane
    constexpr int VNW = aw ? 4 : 5;                         // early V words per row and lane

    const int lane = threadIdx.x;
    const int warp = threadIdx.y;
    const int tid  = warp*WARP_SIZE + lane;
    const int g    = lane / 4;  // mma group: K rows g, g+8 / Q head g / V dims of lane g
    const int t    = lane % 4;  // lane in the group: heads 2t, 2t+1 of the C fragments / V rows 2t, 2t+1, 2t+8, 2t+9

    // ng: the Q heads this block computes, G, or all gqa_ratio < G heads of its K/V head (G = 8 for a
    // ratio of 3, 5, 6 or 7: the mma's 8 columns hold the whole group, each K/V row read once)
    const int gqa_ratio = ne02 / ne12;
    const int ng        = gqa_ratio < G ? gqa_ratio : G;
    const int sequence  = blockIdx.z / (ne02/ng);
    const int head0     = (blockIdx.z - sequence*(ne02/ng))*ng;
    const char * Q = Q_ptr + nb03*sequence + nb02*head0;
    const char * K = K_ptr + nb13*sequence + nb12*(head0 / gqa_ratio);
    const char * V = V_ptr + nb23*sequence + nb22*(head0 / gqa_ratio);
    const half * maskh = mask_ptr ? (const half *) (mask_ptr + nb33*(sequence % ne33)) : nullptr;

    float slope[2];  // ALiBi slopes of heads 2t, 2t+1 (columns beyond ng: any finite value)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        slope[hh] = get_alibi_slope(max_bias, head0 + (2*t + hh < ng ? 2*t + hh : ng - 1), n_head_log2, m0, m1);
    }

    __shared__ __align__(16) int8_t sh_q[8][D];   // Q (scaled) as int8, 8 columns
    __shared__ uint32_t sh_qh[KH ? 8 : 1][D/2];     // f16 K: Q (scaled) as half2
    __shared__ float sh_qd[8][NB];                // its scale per 64 dims
    __shared__ int   sh_qs[8][NB];                // s7: the sum of its int8 values per 64 dims
    __shared__ float sh_max[8][nwarps];
    __shared__ float sh_sum[8][nwarps];
    // the staged rows (two tiles: 2 x nwarps x 64 slots) and, after the KV loop, the warps' accumulators
    constexpr int SL      = ggml_cuda_turbo_fa_mma_slot;
    constexpr int n_stage = stage ? 2*nwarps*64*SL : 0;
    constexpr int n_acc   = nwarps*G*D*(int) sizeof(float);
    __shared__ __align__(16) char sh_buf[n_stage > n_acc ? n_stage : n_acc];
    float (*sh_acc)[G][D] = (float (*)[G][D]) sh_buf;

    ggml_cuda_pdl_sync();
    // the rows of this lane: K rows kw + 16 mt + 8 rr + g, V rows kw + 16 mt + 8 rp + 2t + r
    // (kw = k0 + 32 warp), as a base per lane plus offsets that do not change in the KV loop
    const char * K_lane = K + (int64_t) (warp*32 + g)*nb11;
    const char * V_lane = V + (int64_t) (warp*32 + 2*t)*nb21;
    const int nb11_8 = 8*nb11;
    const int nb21_8 = 8*nb21;
    const int k_VKQ_max = KV_max_ptr ? KV_max_ptr[sequence*gridDim.x + blockIdx.x] : ne11;
    // next_k: this lane's K words and mask values of the warp's next tile, [mt][rr] = row 16 mt + 8 rr + g;
    // k_first: the first tile's now, before Q's load
    uint32_t Kn[2][2][NH][KNW];
    uint16_t Mn[2][2];
    if constexpr (next_k) {
        static_assert(K4 && !stage, "next-tile K loads: turbo4 K, rows from global memory");
        if (k_first && blockIdx.y*T < ne11) {  // (not k_VKQ_max: the loads need not wait for its value; rows below ne11 exist)
            ggml_cuda_turbo_fa_mma_next_k<aw, NH>(Kn, Mn, K_lane + (int64_t) (blockIdx.y*T)*nb11, nb11_8, maskh, blockIdx.y*T + warp*32 + g, t);
        }
    }
    // Q to int8 per 64 dims (one turbo block): warp w takes columns w and w + 4, lane l values 128 hf + 4l..4l+3 of
    // each 128 (hf < NH; hd 64: lanes 0..15)
    const bool q_in = D >= 128 || 4*lane < D;
    for (int h = warp; h < 8; h += nwarps) {
#pragma unroll
        for (int hf = 0; hf < NH; ++hf) {
            float x[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                x[c] = h < ng && q_in ? scale * ((const float *) (Q + h*nb02))[128*hf + 4*lane + c] : 0.0f;
            }
            if constexpr (KH) {
                const half2 x01 = __floats2half2_rn(x[0], x[1]);
                const half2 x23 = __floats2half2_rn(x[2], x[3]);
                if (q_in) {
                    sh_qh[h][64*hf + 2*lane + 0] = *((const uint32_t *) &x01);
                    sh_qh[h][64*hf + 2*lane + 1] = *((const uint32_t *) &x23);
                }
                continue;
            }
            float amax = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
#pragma unroll
            for (int off = 1; off < 16; off <<= 1) {  // the 16 lanes of one block of 64
                amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFF, amax, off, WARP_SIZE));
            }
            const float d  = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f/d : 0.0f;
            uint32_t q = 0;
            int qsum = 0;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int qc = __float2int_rn(x[c]*id);
                q |= (uint32_t) (uint8_t) (int8_t) qc << (8*c);
                qsum += qc;
            }
            if (q_in) {
                *((uint32_t *) &sh_q[h][128*hf + 4*lane]) = q;
            }
            if constexpr (s7K) {
#pragma unroll
                for (int off = 1; off < 16; off <<= 1) {
                    qsum += __shfl_xor_sync(0xFFFFFFFF, qsum, off, WARP_SIZE);
                }
            }
            if (lane % 16 == 0 && q_in) {
                sh_qd[h][2*hf + lane/16] = d;
                if constexpr (s7K) {
                    sh_qs[h][2*hf + lane/16] = qsum;
                }
            }
        }
    }
    __syncthreads();

    // B fragments of K.Q: column (head) g; k-step (m, j) of block m. turbo4 K: elements o.., o = 4t + 16j,
    // in the order of the K words (above): b0 = (o, o+32, o+1, o+33), b1 = (o+2, o+34, o+3, o+35); other
    // K types (ggml_cuda_turbo_fa_dec_K's order): b0 = elements 32j + 4t .. +3, b1 = 32j + 16 + 4t .. +3
    uint32_t Bq[NB][2][2];
#pragma unroll
    for (int m = 0; m < (KH ? 0 : NB); ++m) {  // (f16 K: Bh below)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            if constexpr (K4 && aw) {  // qs bytes p_k of the word: elements p_k (low nibble) and p_k + 32 (high)
                uint32_t b[2] = { 0, 0 };
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int p = 64*m + ggml_cuda_turbo_fa_mma_qs_pos<aw>(m, j, t, k);
                    b[k/2] |= ((uint32_t) (uint8_t) sh_q[g][p] | (uint32_t) (uint8_t) sh_q[g][p + 32] << 8) << (16*(k % 2));
                }
                Bq[m][j][0] = b[0];
                Bq[m][j][1] = b[1];
            } else if constexpr (K8 && aw) {  // block 2m + j; an even block's words start 2 bytes into its qs (ggml_cuda_turbo_fa_mma_q8_words_aw)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    uint32_t b = 0;
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const int p = 64*m + 32*j + (j == 0 ? ggml_cuda_turbo_fa_mma_qs_pos<true>(0, h, t, k) : 16*h + 4*t + k);
                        b |= (uint32_t) (uint8_t) sh_q[g][p] << (8*k);
                    }
                    Bq[m][j][h] = b;
                }
            } else if constexpr (K3 || K2) {  // the words' element order: b0 = the A register of the low 16 bits' nibbles, b1 the high ones'
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    uint32_t b = 0;
#pragma unroll
                    for (int k = 0; k < 4; ++k) {  // nibble k: byte 2h + k/2 of the word, its low (k even) or high nibble
                        b |= (uint32_t) (uint8_t) sh_q[g][64*m + ggml_cuda_turbo_fa_mma_k_elem<type_K>(t, j, 2*h + k/2, k % 2)] << (8*k);
                    }
                    Bq[m][j][h] = b;
                }
            } else if constexpr (K4) {
                const uint32_t lo = *((const uint32_t *) &sh_q[g][64*m + 4*t + 16*j]);
                const uint32_t hi = *((const uint32_t *) &sh_q[g][64*m + 4*t + 16*j + 32]);
                Bq[m][j][0] = __byte_perm(lo, hi, 0x5140);
                Bq[m][j][1] = __byte_perm(lo, hi, 0x7362);
            } else {
                Bq[m][j][0] = *((const uint32_t *) &sh_q[g][64*m + 32*j + 4*t]);
                Bq[m][j][1] = *((const uint32_t *) &sh_q[g][64*m + 32*j + 16 + 4*t]);
            }
        }
    }
    uint32_t Bh[KH ? D/16 : 1][2];  // f16 K: B of k-step s = Q's dims (D/4) t + 4s .. + 3 of head g (ggml_cuda_turbo_fa_mma_f16_row)
    if constexpr (KH) {
#pragma unroll
        for (int st = 0; st < D/16; ++st) {
            Bh[st][0] = sh_qh[g][(D/8)*t + 2*st + 0];
            Bh[st][1] = sh_qh[g][(D/8)*t + 2*st + 1];
        }
    }
    GGML_UNUSED(Bh);
    float qd[NB][2];  // scale of Q per block for the C columns 2t, 2t+1, times the int8 table's step
    int   c0[NB][2];  // K.Q's C at the start: 0, or (s7) -64 x the sum of the column's int8 Q values in the block
#pragma unroll
    for (int m = 0; m < NB; ++m) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            if constexpr (KH) {
                qd[m][hh] = 1.0f;  // (not used: K.Q runs in fp16)
            } else if constexpr (K8) {
                qd[m][hh] = sh_qd[2*t + hh][m];  // K's values are the stored int8: no table step
            } else {
                qd[m][hh] = sh_qd[2*t + hh][m] * ggml_cuda_turbo_i8_step<type_K, qmax_K>();
            }
            c0[m][hh] = s7K ? -ggml_cuda_turbo_code7_bias*sh_qs[2*t + hh][m] : 0;
        }
    }

    uint32_t tK[4], tVlo[4], tVhi[4];  // int8 centroids of K; fp16 centroids of V, low and high bytes (v_i8: int8 + 128 in tVlo; s7: 7-bit codes, plane 4)
    if constexpr (!K8 && !KH) {
        ggml_cuda_turbo_fa_mma_table<type_K, s7K ? 4 : 0>(tK, ne00);
    }
    GGML_UNUSED(tK);
    ggml_cuda_turbo_fa_mma_table<type_V, s7V ? 4 : v_i8 ? 3 : 1>(tVlo, ne00);
    if constexpr (!v_i8) {
        ggml_cuda_turbo_fa_mma_table<type_V, 2>(tVhi, ne00);
    }
    const uint32_t m4 = ggml_cuda_turbo_fa_mma_opaque(0x4444, ne00);
    const uint32_t x64 = ggml_cuda_turbo_fa_mma_opaque(0x64646464, ne00);  // v_i8: the high byte of fp16 1024 + xx
    GGML_UNUSED(x64);
    const uint32_t sel_k_aw = ggml_cuda_turbo_fa_mma_aw_sel(t == 3);  // aw: lane 3's second block-0 K word, lane 7's V word
    const uint32_t sel_v_aw = ggml_cuda_turbo_fa_mma_aw_sel(g == 7);
    GGML_UNUSED_VARS(sel_k_aw, sel_v_aw);

    float O[NM][4];  // O^T: dims (sigma(i, g), sigma(i, g) + 1) x heads (2t, 2t+1)
#pragma unroll
    for (int i = 0; i < NM; ++i) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            O[i][c] = 0.0f;
        }
    }
    float KQ_max[2] = { -FLT_MAX/2.0f, -FLT_MAX/2.0f };
    float KQ_sum[2] = { 0.0f, 0.0f };

    char * const stage_warp = sh_buf + warp*64*SL;  // tile buffer b of this warp: + b*nwarps*64*SL
    int buf = 0;
    if constexpr (stage) {
        if (blockIdx.y*T < k_VKQ_max) {
            const int kw = blockIdx.y*T + warp*32;
            ggml_cuda_turbo_fa_mma_stage<RBK>(stage_warp,         K + (int64_t) (kw + lane)*nb11, lane);
            ggml_cuda_turbo_fa_mma_stage<RBV>(stage_warp + 32*SL, V + (int64_t) (kw + lane)*nb21, lane);
        }
        ggml_cuda_turbo_fa_dec_cp_commit();
    }
    if constexpr (next_k) {  // (k_first: loaded above)
        if (!k_first && blockIdx.y*T < k_VKQ_max) {
            ggml_cuda_turbo_fa_mma_next_k<aw, NH>(Kn, Mn, K_lane + (int64_t) (blockIdx.y*T)*nb11, nb11_8, maskh, blockIdx.y*T + warp*32 + g, t);
        }
    }
    for (int k0 = blockIdx.y*T; k0 < k_VKQ_max; k0 += gridDim.y*T) {
        const int kw = k0 + warp*32;  // this warp's 32 rows
        uint32_t Kc[2][2][NH][KNW];  // next_k: this tile's words and mask values
        uint16_t Mc[2][2];
        if constexpr (next_k) {
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
                for (int rr = 0; rr < 2; ++rr) {
                    Mc[mt][rr] = Mn[mt][rr];
#pragma unroll
                    for (int h = 0; h < NH; ++h) {
#pragma unroll
                        for (int i = 0; i < KNW; ++i) {
                            Kc[mt][rr][h][i] = Kn[mt][rr][h][i];
                        }
                    }
                }
            }
            const int kn = k0 + gridDim.y*T;
            if (kn < k_VKQ_max) {
                ggml_cuda_turbo_fa_mma_next_k<aw, NH>(Kn, Mn, K_lane + (int64_t) kn*nb11, nb11_8, maskh, kn + warp*32 + g, t);
            }
        }
        const char * K_k0 = K_lane + (int64_t) k0*nb11;
        const char * V_k0 = V_lane + (int64_t) k0*nb21;
        const char * sK   = stage_warp + buf*nwarps*64*SL;  // staged: K rows in slots 0..31, V rows in 32..63
        if constexpr (stage) {
            const int kn = k0 + gridDim.y*T;
            if (kn < k_VKQ_max) {  // the next tile into the other buffer (read in the previous iteration)
                char * nK = stage_warp + (buf ^ 1)*nwarps*64*SL;
                ggml_cuda_turbo_fa_mma_stage<RBK>(nK,         K + (int64_t) (kn + warp*32 + lane)*nb11, lane);
                ggml_cuda_turbo_fa_mma_stage<RBV>(nK + 32*SL, V + (int64_t) (kn + warp*32 + lane)*nb21, lane);
            }
            ggml_cuda_turbo_fa_dec_cp_commit();
            ggml_cuda_turbo_fa_dec_cp_wait_prev();  // this tile's copies (of this lane) are done
            __syncwarp();                          // ... and those of the other lanes are visible
        }

        // early_v: the raw words of this lane's V rows (the P.V section below reads them from here)
        uint32_t Vw[2][2][2][NH][VNW];  // [mt][rp][r][half]: words g, g+1, 9+g, 0, 8 of the half (aw: 1+g, 9+g, 0, 8)
        if constexpr (early_v) {
            static_assert(V4 && !stage, "early V loads: turbo4 V, rows from global memory");
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
                for (int rp = 0; rp < 2; ++rp) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
#pragma unroll
                        for (int hf = 0; hf < NH; ++hf) {
                            const uint32_t * W = (const uint32_t *) (V_k0 + (2*mt + rp)*nb21_8 + r*nb21) + ggml_cuda_turbo_fa_mma_half_words*hf;
                            if constexpr (aw) {  // block 0's qs bytes (2 + 4g ..) mod 32 (ggml_cuda_turbo_fa_mma_k4_load)
                                const uint32_t * Wg = W + g;
                                Vw[mt][rp][r][hf][0] = Wg[1];
                                Vw[mt][rp][r][hf][1] = Wg[9];
                                Vw[mt][rp][r][hf][2] = W[0];
                                Vw[mt][rp][r][hf][3] = W[8];
                            } else {
                                Vw[mt][rp][r][hf][0] = W[g];
                                Vw[mt][rp][r][hf][1] = W[g + 1];
                                Vw[mt][rp][r][hf][2] = W[9 + g];
                                Vw[mt][rp][r][hf][3] = W[0];
                                Vw[mt][rp][r][hf][4] = W[8];
                            }
                        }
                    }
                }
            }
        }

        // ---- K.Q for rows kw + 16 mt + g + 8 rr
        float S[2][2][2];  // [mt][rr][hh]
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          if constexpr (KH) {  // f16 K: rows g and g + 8 of the k-step as stored, fp16 products summed in fp32
            uint32_t w[2][D/8];
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                ggml_cuda_turbo_fa_mma_f16_row<D>(w[rr], K_k0 + (2*mt + rr)*nb11_8, t);
            }
            float C[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
            for (int st = 0; st < D/16; ++st) {
                const uint32_t a[4] = { w[0][2*st], w[1][2*st], w[0][2*st + 1], w[1][2*st + 1] };
                ggml_cuda_turbo_mma_f16(C, a, Bh[st]);
            }
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const float mval = maskh ? __half2float(maskh[kw + 16*mt + 8*rr + g]) : 0.0f;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    S[mt][rr][hh] = C[2*rr + hh] + slope[hh]*mval;
                }
            }
          } else {
            uint32_t A[NB][2][4];  // [block][j][register]
            float    dk[2][NB*KB];  // [rr][the K scale of block m (q8_0: of k-step j of block m, 2m + j)]
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const char * Kr = K_k0 + (2*mt + rr)*nb11_8;
                const uint32_t * W = stage ? (const uint32_t *) (sK + (16*mt + 8*rr + g)*SL + ((uintptr_t) Kr & 15)) : (const uint32_t *) Kr;
                if constexpr (K4) {
                    uint32_t w[NB][2];
                    if constexpr (D == 64) {  // one block, 2-byte aligned: the words at qs offsets 4t and 4t + 16, and d
                        const char * Kb = (const char *) W;
                        w[0][0] = ggml_cuda_turbo_fa_mma_word2(Kb, 4*t);
                        w[0][1] = ggml_cuda_turbo_fa_mma_word2(Kb, 4*t + 16);
                        dk[rr][0] = __half2float(*((const half *) Kb));
                    } else if constexpr (next_k) {
                        ggml_cuda_turbo_fa_mma_k4_unpack<aw, NH>(w, dk[rr], Kc[mt][rr], sel_k_aw);
                    } else {
                        uint32_t r[NH][KNW];
                        ggml_cuda_turbo_fa_mma_k4_load<aw, NH>(r, W, t);
                        ggml_cuda_turbo_fa_mma_k4_unpack<aw, NH>(w, dk[rr], r, sel_k_aw);
                    }
#pragma unroll
                    for (int m = 0; m < NB; ++m) {
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            if constexpr (s7K) {
                                const uint32_t nw = ~w[m][j];
                                A[m][j][rr + 0] = ggml_cuda_turbo_fa_mma_lookup7(w[m][j],       nw,       tK);
                                A[m][j][rr + 2] = ggml_cuda_turbo_fa_mma_lookup7(w[m][j] >> 16, nw >> 16, tK);
                            } else {
                                A[m][j][rr + 0] = ggml_cuda_turbo_fa_mma_lookup<type_K>(w[m][j], tK, m4);        // cols 4t..: (o, o+32, o+1, o+33)
                                A[m][j][rr + 2] = ggml_cuda_turbo_fa_mma_lookup<type_K>(w[m][j] >> 16, tK, m4);  // cols 16+4t..: (o+2, o+34, o+3, o+35)
                            }
                        }
                    }
                } else if constexpr (K8) {  // k-step j of 64-dim block m = q8_0 block 2m + j
                    uint32_t a[2*NB][2];
                    if constexpr (aw) {
                        ggml_cuda_turbo_fa_mma_q8_words_aw(W, t, sel_k_aw, a, dk[rr]);
                    } else {
                        ggml_cuda_turbo_fa_mma_q8_words<2*NB>(W, t, a, dk[rr]);
                    }
#pragma unroll
                    for (int m = 0; m < NB; ++m) {
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            A[m][j][rr + 0] = a[2*m + j][0];
                            A[m][j][rr + 2] = a[2*m + j][1];
                        }
                    }
                } else if constexpr (K3 || K2) {  // per block its two index words (ggml_cuda_turbo_fa_mma_k_words) and d
#pragma unroll
                    for (int m = 0; m < NB; ++m) {
                        const char * blk = (const char *) W + m*(int) sizeof(block_K);
                        uint32_t x[2];  // (an odd block's qs lie 4-byte aligned in rows of 128 and 256 values: 26 m + 2, 18 m + 2)
                        ggml_cuda_turbo_fa_mma_k_words<type_K>(x, blk + 2, t, D >= 128 && m % 2 == 1);
                        dk[rr][m] = __half2float(*((const half *) blk));
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            A[m][j][rr + 0] = ggml_cuda_turbo_prmt(tK[0], tK[1], x[j]);  // 8 or 4 entries: the nibbles' high bits clear
                            A[m][j][rr + 2] = ggml_cuda_turbo_prmt(tK[0], tK[1], x[j] >> 16);
                        }
                    }
                } else {  // elements 16q + 4t .. +3 of block m in v[4m + q] (the decode kernel's K lanes)
                    int   v[D/16];
                    float dkm[NB];
                    ggml_cuda_turbo_fa_dec_K<type_K, D>((const char *) W, t, v, dkm);
#pragma unroll
                    for (int m = 0; m < NB; ++m) {
                        dk[rr][m] = dkm[m];
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            A[m][j][rr + 0] = (uint32_t) v[4*m + 2*j];
                            A[m][j][rr + 2] = (uint32_t) v[4*m + 2*j + 1];
                        }
                    }
                }
            }
            // K.Q's int32 C per block m (q8_0: per k-step), scaled into the fp32 scores: sacc[rr][hh] sums the blocks in
            // the order m, then k-step; q8_0 K at hd 256 (fold) adds each block's C as soon as its mma is done (8 k-steps
            // of C would not fit beside O's 16 m-tiles), the others after all of them (the register allocation measured
            // on the GPU), the same floats
            constexpr bool fold = K8 && D == 256;
            float sacc[2][2] = { { 0.0f, 0.0f }, { 0.0f, 0.0f } };
            int C[fold ? 1 : NB][KB][4];  // [block][K scale (q8_0: k-step j)]
#pragma unroll
            for (int m = 0; m < NB; ++m) {
                const int mc = fold ? 0 : m;
#pragma unroll
                for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        C[mc][kb][c] = c0[m][c % 2];  // column (head) 2t + c % 2
                    }
                }
                ggml_cuda_turbo_mma_s8(C[mc][0],      A[m][0], Bq[m][0]);
                ggml_cuda_turbo_mma_s8(C[mc][KB - 1], A[m][1], Bq[m][1]);
                if constexpr (fold) {
#pragma unroll
                    for (int rr = 0; rr < 2; ++rr) {
#pragma unroll
                        for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
                            for (int kb = 0; kb < KB; ++kb) {
                                sacc[rr][hh] += (dk[rr][KB*m + kb]*qd[m][hh]) * (float) C[0][kb][2*rr + hh];
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const float mval = next_k ? __half2float(*((const half *) &Mc[mt][rr])) : maskh ? __half2float(maskh[kw + 16*mt + 8*rr + g]) : 0.0f;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    float s = sacc[rr][hh];
                    if constexpr (!fold) {
#pragma unroll
                        for (int m = 0; m < NB; ++m) {
#pragma unroll
                            for (int kb = 0; kb < KB; ++kb) {
                                s += (dk[rr][KB*m + kb]*qd[m][hh]) * (float) C[m][kb][2*rr + hh];
                            }
                        }
                    }
                    S[mt][rr][hh] = s + slope[hh]*mval;
                }
            }
          }
        }

        // ---- online softmax per head (2t, 2t+1): the max over the warp's 32 rows
        float P[2][2][2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float mx = fmaxf(fmaxf(S[0][0][hh], S[0][1][hh]), fmaxf(S[1][0][hh], S[1][1][hh]));
#pragma unroll
            for (int off = 4; off < WARP_SIZE; off <<= 1) {  // the 8 groups (rows)
                mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFF, mx, off, WARP_SIZE));
            }
            const float mnew = fmaxf(KQ_max[hh], mx);
            const float rescale = expf(KQ_max[hh] - mnew);
            KQ_max[hh] = mnew;
            float sum = 0.0f;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
                for (int rr = 0; rr < 2; ++rr) {
                    P[mt][rr][hh] = expf(S[mt][rr][hh] - mnew);
                    sum += P[mt][rr][hh];
                }
            }
            KQ_sum[hh] = KQ_sum[hh]*rescale + sum;
            if (rescale != 1.0f) {  // on a long cache the running max rarely moves
                ggml_cuda_turbo_fa_mma_scale_column(O, hh, rescale);
            }
        }

        // ---- P.V: k-step mt = rows kw + 16 mt .. + 15
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            // B: rows (2t, 2t+1) and (2t+8, 2t+9) of the k-step x head g, from rows g / g+8 x heads (2t, 2t+1)
            uint32_t Bp[2];
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const half2 p = __floats2half2_rn(P[mt][rr][0], P[mt][rr][1]);
                Bp[rr] = ggml_cuda_turbo_movmatrix(*((const uint32_t *) &p));
            }
            // V rows 2t + 8 rp + {0, 1}: their indices at qs offset 4g of each block, interleaved
            // turbo4: pw = both rows' indices, nibble by nibble; other types: sel = each row's selectors
            uint32_t pw[2][NB][2];     // [rp][block][s: elements < 32 / >= 32], nibbles (row 2t, row 2t+1) per element
            uint32_t sel[2][2][NB][2]; // [rp][r][block][s]: elements 4g .. +3 (s = 0) and 32 + 4g .. +3 (s = 1)
            half2    dv[2][NB];        // (d of row 2t, d of row 2t+1) per block
#pragma unroll
            for (int rp = 0; rp < 2; ++rp) {
                uint32_t iw[2][NB];
                uint32_t ds[2][NB];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const char * Vr = V_k0 + (2*mt + rp)*nb21_8 + r*nb21;
                    const uint32_t * W = stage ? (const uint32_t *) (sK + (32 + 16*mt + 8*rp + 2*t + r)*SL + ((uintptr_t) Vr & 15)) : (const uint32_t *) Vr;
                    if constexpr (early_v && aw) {
#pragma unroll
                        for (int hf = 0; hf < NH; ++hf) {
                            iw[r][2*hf + 0] = __byte_perm(Vw[mt][rp][r][hf][2], Vw[mt][rp][r][hf][0], sel_v_aw);
                            iw[r][2*hf + 1] = Vw[mt][rp][r][hf][1];
                            ds[r][2*hf + 0] = Vw[mt][rp][r][hf][2] & 0xFFFF;
                            ds[r][2*hf + 1] = Vw[mt][rp][r][hf][3] >> 16;
                        }
                    } else if constexpr (early_v) {  // the same words as below, loaded before K.Q
#pragma unroll
                        for (int hf = 0; hf < NH; ++hf) {
                            iw[r][2*hf + 0] = __byte_perm(Vw[mt][rp][r][hf][0], Vw[mt][rp][r][hf][1], 0x5432);
                            iw[r][2*hf + 1] = Vw[mt][rp][r][hf][2];
                            ds[r][2*hf + 0] = Vw[mt][rp][r][hf][3] & 0xFFFF;
                            ds[r][2*hf + 1] = Vw[mt][rp][r][hf][4] >> 16;
                        }
                    } else if constexpr (V4 && D == 64) {  // one block, 2-byte aligned
                        iw[r][0] = ggml_cuda_turbo_fa_mma_word2(Vr, 4*g);
                        ds[r][0] = *((const uint16_t *) Vr);
                    } else if constexpr (V4) {
                        ggml_cuda_turbo_fa_mma_v4_words<NB>(W, 4*g, iw[r], ds[r]);
                    } else if constexpr (V3) {  // fields 2 (g/2), + 1 of elements 4 (g % 2) .. of each block (rows g/4, g/4 + 1)
#pragma unroll
                        for (int m = 0; m < NB; ++m) {
                            const char * blk = Vr + m*(int) sizeof(block_turbo3_0);
                            uint32_t x[1];
                            ggml_cuda_turbo_fa_mma_t3_words<1>(x, blk + 2, 4*(g % 2), g/4, 6*(g/2) - 8*(g/4), D >= 128 && m % 2 == 1);
                            iw[r][m] = x[0];
                            ds[r][m] = *((const uint16_t *) blk);
                        }
                    } else if constexpr (V2) {  // qs bytes 2g, 2g + 1 of each block: bytes 0, 1 of the word fields 0 / 2, bytes 2, 3 fields 1 / 3
#pragma unroll
                        for (int m = 0; m < NB; ++m) {
                            const char * blk = Vr + m*(int) sizeof(block_turbo2_0);
                            const uint32_t h = *((const uint16_t *) (blk + 2 + 2*g));
                            iw[r][m] = (h & 0x3333) | ((h << 14) & 0x33330000);
                            ds[r][m] = *((const uint16_t *) blk);
                        }
                    } else {
#pragma unroll
                        for (int m = 0; m < NB; ++m) {
                            const block_V * b = (const block_V *) W + m;
                            ggml_cuda_turbo_fa_dec_V_sel<type_V>(b, g, sel[rp][r][m][0], sel[rp][r][m][1]);
                            ds[r][m] = *((const uint16_t *) &b->d);
                        }
                    }
                }
#pragma unroll
                for (int m = 0; m < NB; ++m) {
                    if constexpr (VW) {
                        pw[rp][m][0] = (iw[0][m] & 0x0F0F0F0F) | ((iw[1][m] << 4) & 0xF0F0F0F0);
                        pw[rp][m][1] = ((iw[0][m] >> 4) & 0x0F0F0F0F) | (iw[1][m] & 0xF0F0F0F0);
                    }
                    const uint32_t d2 = ds[0][m] | (ds[1][m] << 16);
                    dv[rp][m] = *((const half2 *) &d2);
                }
            }
#pragma unroll
            for (int m = 0; m < NB; ++m) {
                uint32_t Bv[2];
#pragma unroll
                for (int rp = 0; rp < 2; ++rp) {
                    const half2 b = *((const half2 *) &Bp[rp]) * dv[rp][m];
                    Bv[rp] = *((const uint32_t *) &b);
                }
#pragma unroll
                for (int s = 0; s < 2; ++s) {
#pragma unroll
                    for (int kp = 0; kp < 2; ++kp) {
                        // m-tile i = 4m + 2s + kp: dims sigma = 64m + 32s + 4g + 2kp (rows g of A) and sigma + 1 (rows g+8)
                        uint32_t Av[4];
#pragma unroll
                        for (int rp = 0; rp < 2; ++rp) {
                            if constexpr (s7V) {
                                const uint32_t sl = pw[rp][m][s] >> (16*kp);
                                const uint32_t ns = ~pw[rp][m][s] >> (16*kp);
                                const uint32_t b  = ggml_cuda_turbo_fa_mma_lookup7(sl, ns, tVlo);  // q + 64: (row 2t, 2t+1) of e, of e + 1
                                ggml_cuda_turbo_fa_mma_i8_pairs<ggml_cuda_turbo_code7_bias>(b, x64, Av[2*rp + 0], Av[2*rp + 1]);
                            } else if constexpr (v_i8 && VW) {
                                const uint32_t sl = pw[rp][m][s] >> (16*kp);
                                const uint32_t b  = ggml_cuda_turbo_fa_mma_lookup_w<type_V, V3 || V2>(sl, tVlo, m4);  // q + 128: (row 2t, 2t+1) of e, of e + 1
                                ggml_cuda_turbo_fa_mma_i8_pairs<128>(b, x64, Av[2*rp + 0], Av[2*rp + 1]);
                            } else if constexpr (VW) {
                                const uint32_t sl = pw[rp][m][s] >> (16*kp);
                                const uint32_t lo = ggml_cuda_turbo_fa_mma_lookup_w<type_V, V3 || V2>(sl, tVlo, m4);
                                const uint32_t hi = ggml_cuda_turbo_fa_mma_lookup_w<type_V, V3 || V2>(sl, tVhi, m4);
                                Av[2*rp + 0] = __byte_perm(lo, hi, 0x5140);  // (row 2t, row 2t+1) of element e
                                Av[2*rp + 1] = __byte_perm(lo, hi, 0x7362);  // of element e + 1
                            } else if constexpr (v_i8) {  // each row's 4 elements as q + 128, paired across the rows, then as fp16
                                const uint32_t b0 = ggml_cuda_turbo_fa_mma_lookup<type_V>(sel[rp][0][m][s], tVlo, m4);
                                const uint32_t b1 = ggml_cuda_turbo_fa_mma_lookup<type_V>(sel[rp][1][m][s], tVlo, m4);
                                const uint32_t b  = __byte_perm(b0, b1, kp ? 0x7362 : 0x5140);  // (row 2t, 2t+1) of e, of e + 1
                                ggml_cuda_turbo_fa_mma_i8_pairs<128>(b, x64, Av[2*rp + 0], Av[2*rp + 1]);
                            } else {  // each row's 4 elements as two half2, then paired across the rows
                                uint32_t x[2];
#pragma unroll
                                for (int r = 0; r < 2; ++r) {
                                    const uint32_t lo = ggml_cuda_turbo_fa_mma_lookup<type_V>(sel[rp][r][m][s], tVlo, m4);
                                    const uint32_t hi = ggml_cuda_turbo_fa_mma_lookup<type_V>(sel[rp][r][m][s], tVhi, m4);
                                    x[r] = __byte_perm(lo, hi, kp ? 0x7362 : 0x5140);  // elements e, e + 1 of row r
                                }
                                Av[2*rp + 0] = __byte_perm(x[0], x[1], 0x5410);  // (row 2t, row 2t+1) of element e
                                Av[2*rp + 1] = __byte_perm(x[0], x[1], 0x7632);  // of element e + 1
                            }
                        }
                        ggml_cuda_turbo_mma_f16(O[4*m + 2*s + kp], Av, Bv);
                    }
                }
            }
        }
        if constexpr (stage) {
            __syncwarp();  // this tile's buffer is written again by the next iteration's copies
            buf ^= 1;
        }
    }

    // sinks: warp 0 of the first KV split adds each column's sink once (lanes of group 0)
    if (sinks_ptr && blockIdx.y == 0 && warp == 0) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float sink = ((const float *) sinks_ptr)[head0 + (2*t + hh < ng ? 2*t + hh : ng - 1)];
            const float mnew = fmaxf(sink, KQ_max[hh]);
            const float rescale = expf(KQ_max[hh] - mnew);
            KQ_max[hh] = mnew;
            KQ_sum[hh] = KQ_sum[hh]*rescale + (g == 0 ? expf(sink - mnew) : 0.0f);
            ggml_cuda_turbo_fa_mma_scale_column(O, hh, rescale);
        }
    }

    // merge the warps: the row groups of a warp share the max; sums add over the 8 groups
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
        for (int off = 4; off < WARP_SIZE; off <<= 1) {
            KQ_sum[hh] += __shfl_xor_sync(0xFFFFFFFF, KQ_sum[hh], off, WARP_SIZE);
        }
        if (g == 0) {
            sh_max[2*t + hh][warp] = KQ_max[hh];
        }
    }
    __syncthreads();  // also: every warp is done with the staged rows (sh_acc reuses their memory)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int h = 2*t + hh;
        float gmax = sh_max[h][0];
#pragma unroll
        for (int w = 1; w < nwarps; ++w) {
            gmax = fmaxf(gmax, sh_max[h][w]);
        }
        const float f = expf(KQ_max[hh] - gmax);
        if (g == 0) {
            sh_sum[h][warp] = KQ_sum[hh]*f;
        }
        const float fv = v_i8 ? f*ggml_cuda_turbo_i8_step<type_V, qmax_V>() : f;  // v_i8: O holds sums of integer centroids
        if (h < ng) {
#pragma unroll
            for (int i = 0; i < NM; ++i) {
                // m-tile i = 4m + 2s + kp of lane g: its A rows g and g + 8 hold the elements e and e + de of block m
                //   V3: field 2 (g/2) + s of element 4 (g % 2) + kp (word byte 2kp) and + 2 (byte 2kp + 1)
                //   V2: field kp (s = 0) / 2 + kp (s = 1) of elements 2g, 2g + 1 (word bytes 2kp, 2kp + 1)
                //   else: 32s + the qs bytes at positions 2kp, 2kp + 1 of block m's word
                const int e  = 64*(i/4) + (V3 ? 8*(2*(g/2) + (i/2) % 2) + 4*(g % 2) + i % 2 :
                                           V2 ? 32*((i/2) % 2) + 16*(i % 2) + 2*g :
                                                32*((i/2) % 2) + ggml_cuda_turbo_fa_mma_qs_pos<aw>(i/4, 0, g, 2*(i % 2)));
                const int de = V3 ? 2 : 1;
                sh_acc[warp][h][e]      = O[i][hh]*fv;
                sh_acc[warp][h][e + de] = O[i][hh + 2]*fv;
            }
        }
    }
    __syncthreads();

    ggml_cuda_turbo_fa_dec_write<D, G, nwarps>(sh_sum, sh_max, sh_acc, dst_ptr, dst_meta_ptr, sequence*int(ne01.z)*ne02 + head0, tid, ng);
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
