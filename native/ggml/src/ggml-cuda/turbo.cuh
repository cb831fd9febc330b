// tqgguf: CUDA device code of the turbo KV-cache types (turbo4_0, turbo3_0, turbo2_0).
//
// Formats: ggml-turbo-common.h (the one definition of the bit layout). Codebooks:
// ggml-turbo-tables.h (generated from tqgguf/reference/codebook.py). CPU codec and the
// encoder this file reproduces bit for bit: ggml-turbo.c.
//
// What lives here, and which upstream entry point uses it:
//   dequantize_turbo{4,3,2}_0        dequantize_kernel_t: GET_ROWS, CPY turbo->f32, to_fp16/to_fp32
//                                    (prefill converts K/V to f16 for the tensor-core FA kernels)
//   quantize_f32_turbo_block_warps   SET_ROWS (the cache write; one or four warps per block)
//   quantize_f32_turbo{4,3,2}_0_block CPY f32->turbo (K-shift; one thread per block, same bytes)
//   vec_dot_fattn_vec_KQ_turbo       FA vector kernel, K.Q with a turbo K (int8 codebook, dp4a on q8_1 Q)
//   dequantize_V_turbo               FA vector kernel, V rows of a turbo V (fp16 codebook in registers)
//
// Decoding is y_j = d * c[idx_j] (one float product, as on the CPU). Encoding is the CPU's
// scale search (docs/DESIGN.md, design change 1) with the CPU's canonical summation order;
// its arithmetic goes through explicit IEEE round-to-nearest PTX (no FMA contraction, no
// flush-to-zero, whatever -use_fast_math says), so a CUDA cache write stores the same bytes
// as the CPU's quantize_row_turboN_0.
#pragma once

#include "common.cuh"
#include "ggml-turbo-tables.h"

#define QR_TURBO 2  // dequantize_kernel_t pairs: element iqs and element iqs + QK_TURBO/2

static __device__ const float ggml_cuda_turbo4_c[16] = GGML_TURBO4_CENTROIDS;
static __device__ const float ggml_cuda_turbo4_b[15] = GGML_TURBO4_BOUNDARIES;
static __device__ const float ggml_cuda_turbo3_c[8]  = GGML_TURBO3_CENTROIDS;
static __device__ const float ggml_cuda_turbo3_b[7]  = GGML_TURBO3_BOUNDARIES;
static __device__ const float ggml_cuda_turbo2_c[4]  = GGML_TURBO2_CENTROIDS;
static __device__ const float ggml_cuda_turbo2_b[3]  = GGML_TURBO2_BOUNDARIES;
static __device__ const float ggml_cuda_turbo_inv_grid[GGML_TURBO_SEARCH_STEPS] = GGML_TURBO_SEARCH_INV_GRID;

static constexpr __host__ __device__ bool ggml_cuda_type_is_turbo(const ggml_type type) {
    return type == GGML_TYPE_TURBO4_0 || type == GGML_TYPE_TURBO3_0 || type == GGML_TYPE_TURBO2_0;
}

// Per-type facts: the block struct, number of levels, centroids and decision boundaries.
template <ggml_type type> struct ggml_cuda_turbo_traits;

template <> struct ggml_cuda_turbo_traits<GGML_TYPE_TURBO4_0> {
    typedef block_turbo4_0 block;
    static constexpr int bits   = 4;  // index width
    static constexpr int levels = 1 << bits;
    static_assert(levels == GGML_TURBO4_LEVELS, "codebook size");
    static __device__ __forceinline__ float c(const int i) { return ggml_cuda_turbo4_c[i]; }
    static __device__ __forceinline__ float b(const int i) { return ggml_cuda_turbo4_b[i]; }
    // boundary i as an immediate (i a compile-time constant)
    static constexpr __host__ __device__ float b_imm(const int i) { constexpr float t[] = GGML_TURBO4_BOUNDARIES; return t[i]; }
};
template <> struct ggml_cuda_turbo_traits<GGML_TYPE_TURBO3_0> {
    typedef block_turbo3_0 block;
    static constexpr int bits   = 3;  // index width
    static constexpr int levels = 1 << bits;
    static_assert(levels == GGML_TURBO3_LEVELS, "codebook size");
    static __device__ __forceinline__ float c(const int i) { return ggml_cuda_turbo3_c[i]; }
    static __device__ __forceinline__ float b(const int i) { return ggml_cuda_turbo3_b[i]; }
    // boundary i as an immediate (i a compile-time constant)
    static constexpr __host__ __device__ float b_imm(const int i) { constexpr float t[] = GGML_TURBO3_BOUNDARIES; return t[i]; }
};
template <> struct ggml_cuda_turbo_traits<GGML_TYPE_TURBO2_0> {
    typedef block_turbo2_0 block;
    static constexpr int bits   = 2;  // index width
    static constexpr int levels = 1 << bits;
    static_assert(levels == GGML_TURBO2_LEVELS, "codebook size");
    static __device__ __forceinline__ float c(const int i) { return ggml_cuda_turbo2_c[i]; }
    static __device__ __forceinline__ float b(const int i) { return ggml_cuda_turbo2_b[i]; }
    // boundary i as an immediate (i a compile-time constant)
    static constexpr __host__ __device__ float b_imm(const int i) { constexpr float t[] = GGML_TURBO2_BOUNDARIES; return t[i]; }
};

// ---------------------------------------------------------------------------------------
// index extraction (layout: ggml-turbo-common.h)

// Index of one element j (0..63).
template <ggml_type type>
static __device__ __forceinline__ int ggml_cuda_turbo_index(const void * vb, const int j) {
    if constexpr (type == GGML_TYPE_TURBO4_0) {
        const block_turbo4_0 * x = (const block_turbo4_0 *) vb;
        return j < QK_TURBO/2 ? (x->qs[j] & 15) : (x->qs[j - QK_TURBO/2] >> 4);
    } else if constexpr (type == GGML_TYPE_TURBO3_0) {
        const block_turbo3_0 * x = (const block_turbo3_0 *) vb;
        const int l = j % 8;
        const uint32_t w = (uint32_t) x->qs[l] | ((uint32_t) x->qs[l + 8] << 8) | ((uint32_t) x->qs[l + 16] << 16);
        return (int) ((w >> (3*(j / 8))) & 7);
    } else {
        const block_turbo2_0 * x = (const block_turbo2_0 *) vb;
        return (x->qs[j % 16] >> (2*(j / 16))) & 3;
    }
}

// ---------------------------------------------------------------------------------------
// dequantize_kernel_t (dequantize.cuh's convention with qk = QK_TURBO, qr = QR_TURBO):
// v.x = element iqs, v.y = element iqs + 32 of block ib

template <ggml_type type>
static __device__ __forceinline__ void dequantize_turbo(const void * vx, const int64_t ib, const int iqs, float2 & v) {
    typedef ggml_cuda_turbo_traits<type> tt;
    const typename tt::block * x = (const typename tt::block *) vx + ib;
    const float d = __half2float(x->d);
    v.x = d * tt::c(ggml_cuda_turbo_index<type>(x, iqs));
    v.y = d * tt::c(ggml_cuda_turbo_index<type>(x, iqs + QK_TURBO/2));
}

static __device__ __forceinline__ void dequantize_turbo4_0(const void * vx, const int64_t ib, const int iqs, float2 & v) {
    dequantize_turbo<GGML_TYPE_TURBO4_0>(vx, ib, iqs, v);
}
static __device__ __forceinline__ void dequantize_turbo3_0(const void * vx, const int64_t ib, const int iqs, float2 & v) {
    dequantize_turbo<GGML_TYPE_TURBO3_0>(vx, ib, iqs, v);
}
static __device__ __forceinline__ void dequantize_turbo2_0(const void * vx, const int64_t ib, const int iqs, float2 & v) {
    dequantize_turbo<GGML_TYPE_TURBO2_0>(vx, ib, iqs, v);
}

// ---------------------------------------------------------------------------------------
// Whole rows to f16 / bf16 / f32: ggml_get_to_{fp16,bf16,fp32}[_nc]_cuda. The tensor-core FA
// kernels of a prefill read K and V as f16, so launch_fattn converts the whole cache view
// once per layer and ubatch (at 64K cells of an 8B model, 268 MB of f16 per layer); this
// conversion is write-bound. One thread writes 16 values of one block as two 16-byte runs
// (f16/bf16) and the lanes of a warp cover 8 consecutive blocks, so each store instruction
// writes whole sectors; the codebook sits in shared memory (16 distinct addresses: no bank
// conflicts). Upstream's generic kernel (dequantize_block: two values per thread, 2-byte
// stores, the codebook through global memory) served these getters before.

// First element of run r (0, 1) of the 8-value runs that quarter q (0..3) of a block covers.
// turbo4 pairs element j with j + 32 in one byte, so a quarter takes 8 bytes' low and high
// nibbles (elements 8q.. and 32 + 8q..); turbo3 and turbo2 spread every 8 or 16 consecutive
// elements over all their bytes, so a quarter takes 16 consecutive elements.
template <ggml_type type>
static constexpr __host__ __device__ int ggml_cuda_turbo_quarter_run(const int q, const int r) {
    return type == GGML_TYPE_TURBO4_0 ? 8*q + (QK_TURBO/2)*r : 16*q + 8*r;
}

// v[8r + k] = d * c[idx of element ggml_cuda_turbo_quarter_run(q, r) + k] of block x, as
// dequantize_turbo computes it (one fp32 product). c: the type's centroids (any memory).
// The index bytes are read as 16-bit words (a block is 2-byte aligned).
template <ggml_type type>
static __device__ __forceinline__ void ggml_cuda_turbo_dequant_quarter(
        const typename ggml_cuda_turbo_traits<type>::block * __restrict__ x, const int q, const float * __restrict__ c, float (&v)[16]) {
    const float d = __half2float(x->d);
    const uint16_t * qs = (const uint16_t *) x->qs;
    if constexpr (type == GGML_TYPE_TURBO4_0) {
        // bytes 8q..8q+7: element 8q + k in the low nibble of byte k, 32 + 8q + k in the high one
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const uint32_t w = qs[4*q + h];
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                const uint32_t byte = (w >> (8*b)) & 0xFF;
                v[2*h + b]     = d * c[byte & 15];
                v[8 + 2*h + b] = d * c[byte >> 4];
            }
        }
    } else if constexpr (type == GGML_TYPE_TURBO3_0) {
        // element 8g + l: bits 3g..3g+2 of qs[l] | qs[l+8] << 8 | qs[l+16] << 16; quarter q is g = 2q, 2q+1
        uint32_t p[12];
#pragma unroll
        for (int h = 0; h < 12; ++h) {
            p[h] = qs[h];
        }
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            const uint32_t w = ((p[l/2] >> (8*(l%2))) & 0xFF) | (((p[4 + l/2] >> (8*(l%2))) & 0xFF) << 8) |
                               (((p[8 + l/2] >> (8*(l%2))) & 0xFF) << 16);
            const uint32_t s = w >> (6*q);
            v[l]     = d * c[s & 7];
            v[8 + l] = d * c[(s >> 3) & 7];
        }
    } else {
        // element 16g + m: bits 2g..2g+1 of qs[m]; quarter q is g = q
#pragma unroll
        for (int h = 0; h < 8; ++h) {
            const uint32_t w = (uint32_t) qs[h] >> (2*q);
            v[2*h]     = d * c[w & 3];
            v[2*h + 1] = d * c[(w >> 8) & 3];
        }
    }
}

#ifndef GGML_CUDA_TURBO_HOST_CHECK
template <typename dst_t>
static __device__ __forceinline__ void ggml_cuda_turbo_store8(dst_t * __restrict__ y, const float * v) {
    if constexpr (std::is_same_v<dst_t, float>) {
        *(float4 *) y       = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *) (y + 4) = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        static_assert(std::is_same_v<dst_t, half> || std::is_same_v<dst_t, nv_bfloat16>, "f32, f16 or bf16");
        uint4 u;
        uint32_t * w = (uint32_t *) &u;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if constexpr (std::is_same_v<dst_t, half>) {
                const half2 h = __floats2half2_rn(v[2*k], v[2*k + 1]);
                w[k] = *(const uint32_t *) &h;
            } else {
                const nv_bfloat162 h = __floats2bfloat162_rn(v[2*k], v[2*k + 1]);
                w[k] = *(const uint32_t *) &h;
            }
        }
        *(uint4 *) y = u;
    }
}

// Four threads per block of the destination, which is contiguous: nblocks blocks in rows of
// bpr blocks; row r = (i01, i02, i03) reads source blocks i01*s01 + i02*s02 + i03*s03 + 0..bpr-1.
template <ggml_type type, typename dst_t>
static __global__ void __launch_bounds__(256) k_turbo_to(const void * __restrict__ vx, dst_t * __restrict__ y, const uint32_t nblocks,
        const uint3 bpr, const uint3 ne01, const uint3 ne02, const int64_t s01, const int64_t s02, const int64_t s03) {
    typedef ggml_cuda_turbo_traits<type> tt;
    __shared__ float c[tt::levels];
    if (threadIdx.x < tt::levels) {
        c[threadIdx.x] = tt::c(threadIdx.x);
    }
    __syncthreads();
    const uint32_t t = blockIdx.x*blockDim.x + threadIdx.x;
    const uint32_t b = t / 4;
    if (b >= nblocks) {
        return;
    }
    const uint2 rc  = fast_div_modulo(b, bpr);     // row, block in the row
    const uint2 r01 = fast_div_modulo(rc.x, ne01);  // i02 + ne02*i03, i01
    const uint2 r02 = fast_div_modulo(r01.x, ne02); // i03, i02
    const int64_t ib = r02.x*s03 + r02.y*s02 + r01.y*s01 + rc.y;
    const int q = t % 4;
    float v[16];
    ggml_cuda_turbo_dequant_quarter<type>((const typename tt::block *) vx + ib, q, c, v);
    dst_t * yb = y + (int64_t) b*QK_TURBO;
    ggml_cuda_turbo_store8(yb + ggml_cuda_turbo_quarter_run<type>(q, 0), v);
    ggml_cuda_turbo_store8(yb + ggml_cuda_turbo_quarter_run<type>(q, 1), v + 8);
}

// to_t_nc_cuda_t: ne00 x ne01 x ne02 x ne03 values (ne00 a multiple of 64), source strides in
// blocks, destination contiguous (16-byte aligned, as ggml's buffers are)
template <ggml_type type, typename dst_t>
static void ggml_cuda_turbo_to_nc(const void * vx, dst_t * y, const int64_t ne00, const int64_t ne01, const int64_t ne02,
        const int64_t ne03, const int64_t s01, const int64_t s02, const int64_t s03, cudaStream_t stream) {
    GGML_ASSERT(ne00 % QK_TURBO == 0);
    const int64_t nblocks = ne00/QK_TURBO * ne01*ne02*ne03;
    GGML_ASSERT(nblocks < (int64_t(1) << 30));  // 4 threads each, counted in 32 bits
    GGML_ASSERT((uintptr_t) y % 16 == 0);         // 16-byte stores
    if (nblocks == 0) {
        return;
    }
    constexpr int nthreads = 256;
    const int64_t ncta = (4*nblocks + nthreads - 1) / nthreads;
    k_turbo_to<type, dst_t><<<(unsigned) ncta, nthreads, 0, stream>>>(vx, y, (uint32_t) nblocks,
        init_fastdiv_values(ne00/QK_TURBO), init_fastdiv_values(ne01), init_fastdiv_values(ne02), s01, s02, s03);
}

// to_t_cuda_t: k contiguous values
template <ggml_type type, typename dst_t>
static void ggml_cuda_turbo_to(const void * vx, dst_t * y, const int64_t k, cudaStream_t stream) {
    ggml_cuda_turbo_to_nc<type, dst_t>(vx, y, k, 1, 1, 1, k/QK_TURBO, k/QK_TURBO, k/QK_TURBO, stream);
}

// GGML_CUDA_TURBO_CVT=0 (runtime, read once): the f16 getters hand out upstream's generic
// dequantize_block again, for measuring one build both ways (docs/CUDA.md); anything else or
// unset: the kernel above.
static bool ggml_cuda_turbo_cvt_generic() {
    static const bool generic = [] {
        const char * s = getenv("GGML_CUDA_TURBO_CVT");
        return s != nullptr && strcmp(s, "0") == 0;
    }();
    return generic;
}
#endif // GGML_CUDA_TURBO_HOST_CHECK

// ---------------------------------------------------------------------------------------
// encoder (one thread per block), bit-exact with ggml-turbo.c's turbo_encode_block_scalar
// with search = 1: the IEEE operations below are the C code's, in the C code's order.

static __device__ __forceinline__ float ggml_cuda_turbo_add(const float a, const float b) {
    float r; asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
static __device__ __forceinline__ float ggml_cuda_turbo_mul(const float a, const float b) {
    float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
static __device__ __forceinline__ float ggml_cuda_turbo_div(const float a, const float b) {
    float r; asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
static __device__ __forceinline__ float ggml_cuda_turbo_sqrt(const float a) {
    float r; asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a)); return r;
}
static __device__ __forceinline__ bool ggml_cuda_turbo_gt(const float a, const float b) {
    unsigned int r;
    asm("{ .reg .pred p; setp.gt.f32 p, %1, %2; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "f"(a), "f"(b));
    return r != 0;
}

// The scale saturates at the fp16 range (never +-inf in the block header), as on the CPU.
static __device__ __forceinline__ float ggml_cuda_turbo_clamp_scale(const float d) {
    return d > 65504.0f ? 65504.0f : (d < -65504.0f ? -65504.0f : d);
}

// Nearest centroid = number of decision boundaries strictly below v (binary search).
template <ggml_type type>
static __device__ __forceinline__ int ggml_cuda_turbo_nearest(const float v) {
    typedef ggml_cuda_turbo_traits<type> tt;
    int i = 0;
#pragma unroll
    for (int step = tt::levels/2; step >= 1; step /= 2) {
        i += ggml_cuda_turbo_gt(v, tt::b(i + step - 1)) ? step : 0;
    }
    return i;
}

// The CPU's canonical order: acc[l] = sum over r ascending of a[8r + l], then
// ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)).
static __device__ __forceinline__ float ggml_cuda_turbo_tree(const float (&acc)[8]) {
    const float a0 = ggml_cuda_turbo_add(acc[0], acc[4]);
    const float a1 = ggml_cuda_turbo_add(acc[1], acc[5]);
    const float a2 = ggml_cuda_turbo_add(acc[2], acc[6]);
    const float a3 = ggml_cuda_turbo_add(acc[3], acc[7]);
    return ggml_cuda_turbo_add(ggml_cuda_turbo_add(a0, a2), ggml_cuda_turbo_add(a1, a3));
}

// Score of candidate inverse scale s: sums <x, c[idx]> and <c[idx], c[idx]>.
template <ggml_type type>
static __device__ __forceinline__ void ggml_cuda_turbo_candidate(const float * x, const float s, float & dot, float & den) {
    typedef ggml_cuda_turbo_traits<type> tt;
    float acc_dot[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
    float acc_den[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
    for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            const float xv = x[8*r + l];
            const float c  = tt::c(ggml_cuda_turbo_nearest<type>(ggml_cuda_turbo_mul(xv, s)));
            acc_dot[l] = ggml_cuda_turbo_add(acc_dot[l], ggml_cuda_turbo_mul(xv, c));
            acc_den[l] = ggml_cuda_turbo_add(acc_den[l], ggml_cuda_turbo_mul(c, c));
        }
    }
    dot = ggml_cuda_turbo_tree(acc_dot);
    den = ggml_cuda_turbo_tree(acc_den);
}

// Pack the indices of x * s (s = 0: every index is the one nearest 0) and the scale d.
template <ggml_type type>
static __device__ __forceinline__ void ggml_cuda_turbo_pack(const float * x, const float s, const float d,
                                                            typename ggml_cuda_turbo_traits<type>::block * y) {
    y->d = __float2half_rn(d);
    int idx[QK_TURBO];
#pragma unroll
    for (int j = 0; j < QK_TURBO; ++j) {
        idx[j] = ggml_cuda_turbo_nearest<type>(ggml_cuda_turbo_mul(x[j], s));
    }
    if constexpr (type == GGML_TYPE_TURBO4_0) {
#pragma unroll
        for (int j = 0; j < QK_TURBO/2; ++j) {
            y->qs[j] = (uint8_t) (idx[j] | (idx[j + QK_TURBO/2] << 4));
        }
    } else if constexpr (type == GGML_TYPE_TURBO3_0) {
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            uint32_t w = 0;
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                w |= (uint32_t) idx[8*r + l] << (3*r);
            }
            y->qs[l]      = (uint8_t) (w & 0xFF);
            y->qs[l + 8]  = (uint8_t) ((w >> 8) & 0xFF);
            y->qs[l + 16] = (uint8_t) (w >> 16);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            y->qs[j] = (uint8_t) (idx[j] | (idx[j + 16] << 2) | (idx[j + 32] << 4) | (idx[j + 48] << 6));
        }
    }
}

template <ggml_type type>
static __device__ void quantize_f32_turbo_block(const float * __restrict__ x, typename ggml_cuda_turbo_traits<type>::block * __restrict__ y) {
    float acc[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
    for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            acc[l] = ggml_cuda_turbo_add(acc[l], ggml_cuda_turbo_mul(x[8*r + l], x[8*r + l]));
        }
    }
    const float n = ggml_cuda_turbo_sqrt(ggml_cuda_turbo_tree(acc));
    if (n == 0.0f) {
        ggml_cuda_turbo_pack<type>(x, 0.0f, 0.0f, y);
        return;
    }
    const float inv = ggml_cuda_turbo_div(1.0f, n);
    // strictly greater wins, so the first of equal scores is kept; a NaN block keeps k = -1
    float best_score = -1.0f, best_dot = 0.0f, best_den = 1.0f;
    int   best_k     = -1;
    for (int k = 0; k < GGML_TURBO_SEARCH_STEPS; ++k) {
        float dot, den;
        ggml_cuda_turbo_candidate<type>(x, ggml_cuda_turbo_mul(inv, ggml_cuda_turbo_inv_grid[k]), dot, den);
        const float score = ggml_cuda_turbo_div(ggml_cuda_turbo_mul(dot, dot), den);
        if (ggml_cuda_turbo_gt(score, best_score)) {
            best_score = score;
            best_dot   = dot;
            best_den   = den;
            best_k     = k;
        }
    }
    float d = ggml_cuda_turbo_div(best_dot, best_den);
    d = ggml_cuda_turbo_clamp_scale(d);
    if (best_k < 0) {
        // the CPU leaves indices 0 and d = 0/1 = 0
        y->d = __float2half_rn(d);
        for (int j = 0; j < (int) sizeof(y->qs); ++j) {
            y->qs[j] = 0;
        }
        return;
    }
    ggml_cuda_turbo_pack<type>(x, ggml_cuda_turbo_mul(inv, ggml_cuda_turbo_inv_grid[best_k]), d, y);
}

static __device__ void quantize_f32_turbo4_0_block(const float * __restrict__ x, block_turbo4_0 * __restrict__ y) {
    quantize_f32_turbo_block<GGML_TYPE_TURBO4_0>(x, y);
}
static __device__ void quantize_f32_turbo3_0_block(const float * __restrict__ x, block_turbo3_0 * __restrict__ y) {
    quantize_f32_turbo_block<GGML_TYPE_TURBO3_0>(x, y);
}
static __device__ void quantize_f32_turbo2_0_block(const float * __restrict__ x, block_turbo2_0 * __restrict__ y) {
    quantize_f32_turbo_block<GGML_TYPE_TURBO2_0>(x, y);
}

// The codebook for the warp encoder, held by the lanes instead of memory: lane j (mod 16)
// holds decision boundary j and centroid j, and a lookup is a shuffle. A binary search over
// __device__ tables made each step a dependent global load (the first of a launch from L2),
// and a decoding step's cache write of a few blocks waited on that chain.
struct ggml_cuda_turbo_lane_tables {
    float b;  // boundary lane % 16 (lanes past the last boundary repeat it)
    float c;  // centroid lane % 16 (lanes past the last centroid repeat it)
};

template <ggml_type type>
static __device__ __forceinline__ ggml_cuda_turbo_lane_tables ggml_cuda_turbo_load_lane_tables(const int lane) {
    typedef ggml_cuda_turbo_traits<type> tt;
    const int j = lane % 16;
    return { tt::b(j < tt::levels - 1 ? j : tt::levels - 2), tt::c(j < tt::levels ? j : tt::levels - 1) };
}

// Nearest centroid index of v (the number of boundaries strictly below it; 0 for NaN): the
// answer of ggml_cuda_turbo_nearest, by the same comparisons. The first step compares with
// the middle boundary and the second with one of two boundaries (immediates and a select),
// the others with a boundary shuffled from the lane that holds it. Every lane of the warp
// must call it (shuffles).
template <ggml_type type>
static __device__ __forceinline__ int ggml_cuda_turbo_nearest_lanes(const float v, const float tb) {
    typedef ggml_cuda_turbo_traits<type> tt;
    constexpr int L = tt::levels;
    int i = ggml_cuda_turbo_gt(v, tt::b_imm(L/2 - 1)) ? L/2 : 0;
#pragma unroll
    for (int step = L/4; step >= 1; step /= 2) {
        const float t = step == L/4 ? (i != 0 ? tt::b_imm(L/2 + L/4 - 1) : tt::b_imm(L/4 - 1))
                                    : __shfl_sync(0xFFFFFFFF, tb, i + step - 1, WARP_SIZE);
        i += ggml_cuda_turbo_gt(v, t) ? step : 0;
    }
    return i;
}

// The warp encoder, for SET_ROWS (the cache write of every token), nwarps (1 or 4) warps per
// block: in each warp, lane 8g + l holds column l (elements l, l+8, ..., l+56) and scores
// candidate 4(p*nwarps + w) + g in pass p (w: the warp); the canonical sum's tree runs across
// the 8 lanes of a group with shuffles (IEEE addition is commutative, so both lanes of a pair
// get the same sum). The best is the highest score, the smallest candidate among equal ones
// (the CPU's sequential loop keeps the first strictly greater), so the order in which groups
// and warps are compared does not matter. Bit-exact with the one-thread encoder. One warp
// runs the 16 candidates in 4 dependent passes (prefill: many blocks per SM); four warps run
// one pass each and meet in shared memory (decoding: a few blocks per token and layer, where
// the chain of dependent steps is the time). For that chain: the codebook sits in the lanes
// (ggml_cuda_turbo_lane_tables), the values the pack needs are loaded with the block, a
// candidate's scale travels with its score (no table read at the end), and no shuffle sits in
// a branch (the search runs for an all-zero block too, and its result is then ignored).

// canonical total of acc[l] held by lanes 8g + l; every lane of the group gets it
static __device__ __forceinline__ float ggml_cuda_turbo_tree_lanes(const float v) {
    const float a = ggml_cuda_turbo_add(v, __shfl_xor_sync(0xFFFFFFFF, v, 4, WARP_SIZE));  // acc[l] + acc[l^4]
    const float b = ggml_cuda_turbo_add(a, __shfl_xor_sync(0xFFFFFFFF, a, 2, WARP_SIZE));  // a0 + a2 | a1 + a3
    return ggml_cuda_turbo_add(b, __shfl_xor_sync(0xFFFFFFFF, b, 1, WARP_SIZE));
}

// candidate (score, k) o replaces best when it scores higher, or equal with a smaller k
// (k < 0: no candidate; a NaN score never wins, as in the CPU's loop)
static __device__ __forceinline__ bool ggml_cuda_turbo_better(const float o_score, const int o_k, const float score, const int k) {
    return ggml_cuda_turbo_gt(o_score, score) || (o_score == score && o_k >= 0 && (k < 0 || o_k < k));
}

struct ggml_cuda_turbo_best {
    float score, dot, den;
    float s;  // the candidate's inverse scale, inv * grid[k]
    int   k;  // -1: none
};

static __device__ __forceinline__ void ggml_cuda_turbo_take_better(ggml_cuda_turbo_best & best, const ggml_cuda_turbo_best & o) {
    if (ggml_cuda_turbo_better(o.score, o.k, best.score, best.k)) {
        best = o;
    }
}

template <ggml_type type, int nwarps>
static __device__ void quantize_f32_turbo_block_warps(const float * __restrict__ x, typename ggml_cuda_turbo_traits<type>::block * __restrict__ y) {
    static_assert(nwarps == 1 || nwarps == 4, "1 or 4 warps per block");
    constexpr int passes = GGML_TURBO_SEARCH_STEPS/(4*nwarps);
    static_assert(passes*4*nwarps == GGML_TURBO_SEARCH_STEPS, "candidates per pass");
    // what a lane packs besides its column: turbo4 x[lane + 32q], turbo2 x[lane % 16 + 16q]
    // (turbo3 packs the column it holds)
    constexpr int npack = type == GGML_TYPE_TURBO4_0 ? 2 : type == GGML_TYPE_TURBO2_0 ? 4 : 0;
    const int lane = threadIdx.x % WARP_SIZE;
    const int w    = nwarps == 1 ? 0 : threadIdx.x / WARP_SIZE;
    const int l    = lane % 8;
    const int g    = lane / 8;

    const ggml_cuda_turbo_lane_tables tab = ggml_cuda_turbo_load_lane_tables<type>(lane);
    float grid[passes];
#pragma unroll
    for (int p = 0; p < passes; ++p) {
        grid[p] = ggml_cuda_turbo_inv_grid[4*(p*nwarps + w) + g];
    }
    float xc[8];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        xc[r] = x[8*r + l];
    }
    float xp[npack > 0 ? npack : 1];
#pragma unroll
    for (int q = 0; q < npack; ++q) {
        xp[q] = type == GGML_TYPE_TURBO4_0 ? x[lane + 32*q] : x[lane % 16 + 16*q];
    }

    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        acc = ggml_cuda_turbo_add(acc, ggml_cuda_turbo_mul(xc[r], xc[r]));
    }
    const float n   = ggml_cuda_turbo_sqrt(ggml_cuda_turbo_tree_lanes(acc));  // the same in every lane and warp
    const float inv = n == 0.0f ? 0.0f : ggml_cuda_turbo_div(1.0f, n);

    ggml_cuda_turbo_best best = { -1.0f, 0.0f, 1.0f, 0.0f, -1 };
#pragma unroll
    for (int p = 0; p < passes; ++p) {
        const float s = ggml_cuda_turbo_mul(inv, grid[p]);
        float acc_dot = 0.0f, acc_den = 0.0f;
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            const int   i = ggml_cuda_turbo_nearest_lanes<type>(ggml_cuda_turbo_mul(xc[r], s), tab.b);
            const float c = __shfl_sync(0xFFFFFFFF, tab.c, i, WARP_SIZE);
            acc_dot = ggml_cuda_turbo_add(acc_dot, ggml_cuda_turbo_mul(xc[r], c));
            acc_den = ggml_cuda_turbo_add(acc_den, ggml_cuda_turbo_mul(c, c));
        }
        ggml_cuda_turbo_best o;
        o.dot   = ggml_cuda_turbo_tree_lanes(acc_dot);
        o.den   = ggml_cuda_turbo_tree_lanes(acc_den);
        o.score = ggml_cuda_turbo_div(ggml_cuda_turbo_mul(o.dot, o.dot), o.den);
        o.s     = s;
        o.k     = 4*(p*nwarps + w) + g;
        ggml_cuda_turbo_take_better(best, o);
    }
    // groups g = 0..3 -> the warp's best
#pragma unroll
    for (int off = 8; off < WARP_SIZE; off <<= 1) {
        ggml_cuda_turbo_best o;
        o.score = __shfl_xor_sync(0xFFFFFFFF, best.score, off, WARP_SIZE);
        o.dot   = __shfl_xor_sync(0xFFFFFFFF, best.dot,   off, WARP_SIZE);
        o.den   = __shfl_xor_sync(0xFFFFFFFF, best.den,   off, WARP_SIZE);
        o.s     = __shfl_xor_sync(0xFFFFFFFF, best.s,     off, WARP_SIZE);
        o.k     = __shfl_xor_sync(0xFFFFFFFF, best.k,     off, WARP_SIZE);
        ggml_cuda_turbo_take_better(best, o);
    }
    if constexpr (nwarps > 1) {
        // warps -> warp 0, which writes the block
        __shared__ ggml_cuda_turbo_best sh_best[nwarps];
        if (lane == 0) {
            sh_best[w] = best;
        }
        __syncthreads();
        if (w != 0) {
            return;
        }
#pragma unroll
        for (int o = 1; o < nwarps; ++o) {
            ggml_cuda_turbo_take_better(best, sh_best[o]);
        }
    }

    float d = 0.0f;
    float s = 0.0f;  // n == 0: every index is the one nearest 0
    if (n != 0.0f) {
        d = ggml_cuda_turbo_clamp_scale(ggml_cuda_turbo_div(best.dot, best.den));
        s = best.k >= 0 ? best.s : 0.0f;
    }
    const bool nan_block = n != 0.0f && best.k < 0;  // the CPU keeps indices 0 and d = 0/1
    if (lane == 0) {
        y->d = __float2half_rn(d);
    }
    auto index = [&](const float v) {  // every lane calls it (shuffles)
        const int i = ggml_cuda_turbo_nearest_lanes<type>(ggml_cuda_turbo_mul(v, s), tab.b);
        return nan_block ? 0 : i;
    };
    if constexpr (type == GGML_TYPE_TURBO4_0) {
        y->qs[lane] = (uint8_t) (index(xp[0]) | (index(xp[1]) << 4));
    } else if constexpr (type == GGML_TYPE_TURBO3_0) {
        uint32_t wd = 0;
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            wd |= (uint32_t) index(xc[r]) << (3*r);
        }
        if (lane < 8) {
            y->qs[l]      = (uint8_t) (wd & 0xFF);
            y->qs[l + 8]  = (uint8_t) ((wd >> 8) & 0xFF);
            y->qs[l + 16] = (uint8_t) (wd >> 16);
        }
    } else {
        const int q = index(xp[0]) | (index(xp[1]) << 2) | (index(xp[2]) << 4) | (index(xp[3]) << 6);
        if (lane < 16) {
            y->qs[lane] = (uint8_t) q;
        }
    }
}

#ifndef GGML_CUDA_TURBO_HOST_CHECK  // tests/cuda_host runs the device functions on the CPU, without the kernels
// SET_ROWS f32 -> turbo, nwarps warps per 64-value block (blocks per CTA: 4/nwarps); the
// index arithmetic is set-rows.cu's
template <typename idx_t, ggml_type type, int nwarps>
static __global__ void k_set_rows_turbo(const float * __restrict__ src0, const idx_t * __restrict__ src1,
        char * __restrict__ dst, const int64_t ne_total,
        const int64_t s01, const int64_t s02, const int64_t s03, const int64_t s10, const int64_t s11, const int64_t s12,
        const int64_t s1, const int64_t s2, const int64_t s3,
        const uint3 ne00, const uint3 ne01, const uint3 ne02, const uint3 ne11_fd, const uint3 ne12_fd) {
    typedef typename ggml_cuda_turbo_traits<type>::block block;
    const int64_t i = (int64_t(blockDim.x) * blockIdx.x + threadIdx.x) / (nwarps*WARP_SIZE);  // block of 64 values
    if (i >= ne_total) {
        return;  // whole warps (nwarps = 1; with 4 the grid is exact, as __syncthreads needs)
    }
    uint32_t tmp = (uint32_t) (i * QK_TURBO);
    uint2 dm  = fast_div_modulo(tmp, ne00);
    const int64_t i00 = dm.y;
    tmp = dm.x;
    dm = fast_div_modulo(tmp, ne01);
    const int64_t i01 = dm.y;
    tmp = dm.x;
    dm = fast_div_modulo(tmp, ne02);
    const int64_t i02 = dm.y;
    const int64_t i03 = dm.x;
    const int64_t i12 = fastmodulo((uint32_t) i03, ne12_fd);
    const int64_t i11 = fastmodulo((uint32_t) i02, ne11_fd);

    ggml_cuda_pdl_sync();
    const int64_t dst_row = src1[i01*s10 + i11*s11 + i12*s12];
    ggml_cuda_pdl_lc();  // the next kernel may start its prologue; its ggml_cuda_pdl_sync waits for this grid
    const float * src_block = src0 + i01*s01 + i02*s02 + i03*s03 + i00;
    block * dst_block = (block *) (dst + dst_row*s1 + i02*s2 + i03*s3) + i00 / QK_TURBO;
    quantize_f32_turbo_block_warps<type, nwarps>(src_block, dst_block);
}

// Host side of SET_ROWS into a turbo tensor (called from set-rows.cu). Strides in bytes as
// ggml gives them; src0 is f32, src1 holds the destination row of every source row.
template <typename idx_t>
static void ggml_cuda_turbo_set_rows(const ggml_tensor * src0, const ggml_tensor * src1, ggml_tensor * dst, cudaStream_t stream) {
    GGML_TENSOR_BINARY_OP_LOCALS
    GGML_ASSERT(ne00 % QK_TURBO == 0);
    const int64_t ne_total = ggml_nelements(src0) / QK_TURBO;
    if (ne_total == 0) {
        return;
    }
    // a CTA of 4 warps; one block per warp when the write fills the GPU (prefill), one block
    // per CTA (the 16 candidates in one pass) when it does not (decoding: a few blocks per token)
    constexpr int warps_per_cta = 4;
    const bool spread = ne_total <= 8*ggml_cuda_info().devices[ggml_cuda_get_device()].nsm;
    const int64_t n_cta = spread ? ne_total : (ne_total + warps_per_cta - 1) / warps_per_cta;
    GGML_ASSERT(n_cta <= INT_MAX);
    const uint3 ne00_fd = init_fastdiv_values((uint32_t) ne00);
    const uint3 ne01_fd = init_fastdiv_values((uint32_t) ne01);
    const uint3 ne02_fd = init_fastdiv_values((uint32_t) ne02);
    const uint3 ne11_fd = init_fastdiv_values((uint32_t) ne11);
    const uint3 ne12_fd = init_fastdiv_values((uint32_t) ne12);
    const float * src0_d = (const float *) src0->data;
    const idx_t * src1_d = (const idx_t *) src1->data;
    const int64_t s01 = nb01/sizeof(float), s02 = nb02/sizeof(float), s03 = nb03/sizeof(float);
    const int64_t s10 = nb10/sizeof(idx_t), s11 = nb11/sizeof(idx_t), s12 = nb12/sizeof(idx_t);
    const ggml_cuda_kernel_launch_params launch_params((int) n_cta, warps_per_cta*WARP_SIZE, 0, stream);
#define TURBO_SET_ROWS_LAUNCH(T) \
    ggml_cuda_kernel_launch(spread ? k_set_rows_turbo<idx_t, T, warps_per_cta> : k_set_rows_turbo<idx_t, T, 1>, launch_params, \
        src0_d, src1_d, (char *) dst->data, ne_total, \
        s01, s02, s03, s10, s11, s12, nb1, nb2, nb3, ne00_fd, ne01_fd, ne02_fd, ne11_fd, ne12_fd)
    switch (dst->type) {
        case GGML_TYPE_TURBO4_0: TURBO_SET_ROWS_LAUNCH(GGML_TYPE_TURBO4_0); break;
        case GGML_TYPE_TURBO3_0: TURBO_SET_ROWS_LAUNCH(GGML_TYPE_TURBO3_0); break;
        case GGML_TYPE_TURBO2_0: TURBO_SET_ROWS_LAUNCH(GGML_TYPE_TURBO2_0); break;
        default: GGML_ABORT("%s: not a turbo type: %s", __func__, ggml_type_name(dst->type));
    }
#undef TURBO_SET_ROWS_LAUNCH
    GGML_UNUSED(ne03); GGML_UNUSED(ne10); GGML_UNUSED(ne13);
}
#endif // GGML_CUDA_TURBO_HOST_CHECK

// cpy_kernel_t for CPY f32 -> turbo
template <ggml_type type>
static __device__ void cpy_blck_f32_turbo(const char * cxi, char * cdsti) {
    quantize_f32_turbo_block<type>((const float *) cxi, (typename ggml_cuda_turbo_traits<type>::block *) cdsti);
}

// ---------------------------------------------------------------------------------------
// flash attention, vector kernel (fattn-vec.cuh)
//
// A turbo K takes the kernel's quantized-K path and a turbo V its quantized-V path, with
// fewer threads per row than upstream gives a quantized side (ggml_cuda_turbo_fa_nthreads_KQ,
// _V: the one change to the kernel, patch 0008): each thread works on 4 consecutive elements
// at a time (one int of q8_1 Q for K.Q; V_rows_per_thread = 4 for V). The 4 indices
// are packed into the 4 nibbles of a __byte_perm selector, and the centroids are looked up
// in registers: PRMT picks a byte of two 32-bit words with the low 3 bits of each selector
// nibble, so 8 levels take one PRMT, 16 levels three (two halves of the table, then a pick
// by the index's bit 3), 4 levels one.
//   K.Q  centroids as int8, round(c * 127 / max|c|), then dp4a with Q as q8_1 exactly like
//        upstream's q8_0/q4_0 K (4 products per instruction); the sum is multiplied by
//        max|c|/127 once. The int8 rounding adds (max|c|/127)^2/12 per coordinate to the
//        error of the cache (+0.5% of turbo4's MSE: 5.7e-7 against 1.1e-4 per coordinate).
//   V    centroids as fp16 (exact to 11 bits), the table split into its low and high bytes,
//        each looked up, then interleaved into two half2; on NVIDIA GPUs the kernel
//        accumulates V in fp32, so they are widened and multiplied by the block scale there.
//        (Until session 6 that path read the fp32 codebook from global memory per value.)
// No shared memory, no table fill, no barrier: the tables are compile-time constants.

// Threads per K row (K.Q) and per V row in the vector kernel when that side is turbo
// (fattn-vec.cuh; upstream gives a quantized side D/4 threads, at most a warp, on NVIDIA).
// A thread takes 4 consecutive elements at a time, 4(n*i + t) .. +3 for n threads per row
// (t: its lane in the row): with n <= 8 its elements o.. and o + 32.. (o < 32) sit in the
// same four bytes of a turbo4 (or turbo2) block's qs, so one load serves 8 values; a row's
// partial sums reduce over n lanes (log2 n shuffles, not 5), and the per-row work of the
// kernel (mask, running max, the V row's softmax weight) is shared by D/n values, not 4.
// K uses 4 threads and V 8: the hd128 turbo4/turbo4 decode loop then has 2208 SASS
// instructions (K: 2 -> 2161, 8 -> 2312; V: 4 -> 2241), against 3276 with upstream's 32 and
// 2277 for upstream's q8_0/q8_0 (session 6, nvcc 12.9, sm_90, static count).
static constexpr int ggml_cuda_turbo_fa_nthreads_KQ = 4;
static constexpr int ggml_cuda_turbo_fa_nthreads_V  = 8;

// Minimum resident blocks per multiprocessor for the vector kernel's __launch_bounds__ when a
// side is turbo and the head dim is at most 128 (upstream asks for 1, so the compiler may take
// up to 255 registers). 3 caps a 128-thread block at 168 registers: turbo3/turbo3 at hd 128
// drops from 232 registers (2 blocks per SM, 12.5% occupancy, latency-bound in Nsight
// Compute) to 168 and from 129.3 to 125.4 µs per call (hd 128, 8 KV heads, GQA 4, KV 32768);
// turbo4 at hd 64/128 already fits. At hd 256 the cap made every turbo pair slower (turbo4
// 31.5 -> 32.9 µs, 1 KV head, GQA 4; two queries per block spill), so it stays at 1 there.
// (session 6, H200, results/cuda/s6/launch-bounds/)
static constexpr __host__ __device__ int ggml_cuda_turbo_fa_min_blocks(const int D, const int ncols, const ggml_type type_K, const ggml_type type_V) {
    return (ggml_cuda_type_is_turbo(type_K) || ggml_cuda_type_is_turbo(type_V)) && D <= 128 ? (ncols > 1 ? 2 : 3) : 1;
}

// Q heads per block of the vector kernel at one query (Q->ne[1] == 1) when a side is turbo.
// Upstream gives each Q head its own block, so the gqa_ratio heads that share a K/V head each
// read and decode every K/V row; with G heads as the block's columns (fattn-vec.cuh's ncols2)
// a row is read and decoded once for G of them (the decode is the turbo kernel's cost: Nsight
// Compute, session 6). G divides gqa_ratio; the registers per column (Q as q8_1, the V
// accumulators) bound it: 4 at head dim 64, 2 at 128, 1 (off) at 256. The heads of a block
// share one mask row and need one ALiBi slope (max_bias 0); logit softcapping keeps G = 1
// (fewer kernel instances).
static constexpr __host__ __device__ int ggml_cuda_turbo_fa_gqa_max(const int D, const ggml_type type_K, const ggml_type type_V) {
    return !(ggml_cuda_type_is_turbo(type_K) || ggml_cuda_type_is_turbo(type_V)) ? 1 : D <= 64 ? 4 : D <= 128 ? 2 : 1;
}

// GGML_CUDA_TURBO_FA_GQA=N (runtime, read once): the largest G <= N that divides the gqa
// ratio, whatever the grid (1 = upstream's one head per block; 4 = the most the vector kernel
// has, 8 the tensor-core kernel's, which takes a whole group of 3, 5, 6 or 7 heads when N is at
// least the ratio); for measuring one build with and without the grouping (as upstream's
// GGML_CUDA_DISABLE_GRAPHS) and for checking the grouped kernels on small cases. Unset (0
// here): G by the wave rule below. A value other than 1..8 is reported and not applied.
static int ggml_cuda_turbo_fa_gqa_env() {
    static const int n = [] {
        const char * s = getenv("GGML_CUDA_TURBO_FA_GQA");
        if (s == nullptr) {
            return 0;
        }
        char * end = nullptr;
        const long v = strtol(s, &end, 10);
        if (end == s || *end != '\0' || v < 1 || v > 8) {
            GGML_LOG_ERROR("%s: GGML_CUDA_TURBO_FA_GQA=%s is not an integer from 1 to 8; not applied\n", __func__, s);
            return 0;
        }
        return (int) v;
    }();
    return n;
}

// G for one FLASH_ATTN_EXT node (dst): the largest G <= ggml_cuda_turbo_fa_gqa_max that divides
// its gqa ratio and still gives the kernel a full wave of blocks, 1 if none. Grouping saves
// decode work but divides the grid by G; launch_fattn splits the KV length into at most
// n_kv/D parallel blocks per column, so a short cache (one sequence at small depth: n_kv 256,
// 4 parts, 3 blocks of SmolLM2's 3 KV heads at G = 3) leaves the GPU nearly empty, and the
// kernel's time is then one block's latency, which grows with G. A wave here is nsm times the
// kernel's minimum resident blocks per SM (its __launch_bounds__).
static inline int ggml_cuda_turbo_fa_gqa_cols(const int D, const ggml_type type_K, const ggml_type type_V, const ggml_tensor * dst) {
    const ggml_tensor * Q = dst->src[0];
    const ggml_tensor * K = dst->src[1];
    float max_bias, logit_softcap;
    memcpy(&max_bias,      (const float *) dst->op_params + 1, sizeof(float));
    memcpy(&logit_softcap, (const float *) dst->op_params + 2, sizeof(float));
    if (Q->ne[1] != 1 || max_bias != 0.0f || logit_softcap != 0.0f || K->ne[2] <= 0 || Q->ne[2] % K->ne[2] != 0) {
        return 1;
    }
    const int gqa_ratio = (int) (Q->ne[2] / K->ne[2]);
    const int env       = ggml_cuda_turbo_fa_gqa_env();
    const int G_max     = ggml_cuda_turbo_fa_gqa_max(D, type_K, type_V);
    const int64_t ntiles_KV = (K->ne[1] + D - 1) / D;
    const int64_t nsm       = ggml_cuda_info().devices[ggml_cuda_get_device()].nsm;
    for (int G = env > 0 && env < G_max ? env : G_max; G > 1; --G) {
        const int64_t blocks = (Q->ne[2] / G) * Q->ne[3] * ntiles_KV;
        if (gqa_ratio % G == 0 && (env > 0 || blocks >= nsm * ggml_cuda_turbo_fa_min_blocks(D, G, type_K, type_V))) {
            return G;
        }
    }
    return 1;
}

// byte lanes of v hold 4 indices (< 16) -> the same indices as the 4 nibbles of a PRMT selector
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_nibsel(const uint32_t v) {
    return __byte_perm(v | (v >> 4), 0, 0x0020);  // bytes 0 and 2 of v | v >> 4: the 4 nibbles in order
}

// turbo4, turbo2: selectors of elements o..o+3 (a) and o+32..o+35 (b) of block vb, o % 4 == 0,
// o < 32 -- the same four bytes of qs (ggml-turbo-common.h's layouts), one load
template <ggml_type type>
static __device__ __forceinline__ void ggml_cuda_turbo_sel4_pair(const void * vb, const uint32_t o, uint32_t & a, uint32_t & b) {
    if constexpr (type == GGML_TYPE_TURBO4_0) {
        const block_turbo4_0 * x = (const block_turbo4_0 *) vb;
        uint32_t w;
        ggml_cuda_memcpy_1<4, 2>(&w, x->qs + o);
        a = ggml_cuda_turbo_nibsel(w & 0x0F0F0F0F);         // element j < 32: low nibble of qs[j]
        b = ggml_cuda_turbo_nibsel((w >> 4) & 0x0F0F0F0F);  // element j + 32: its high nibble
    } else {
        static_assert(type == GGML_TYPE_TURBO2_0, "turbo4 or turbo2");
        const block_turbo2_0 * x = (const block_turbo2_0 *) vb;
        uint32_t w;
        ggml_cuda_memcpy_1<4, 2>(&w, x->qs + (o % 16));
        const uint32_t sh = 2*(o / 16);                       // element j: bits 2(j/16) of qs[j % 16]
        a = ggml_cuda_turbo_nibsel((w >> sh) & 0x03030303);
        b = ggml_cuda_turbo_nibsel((w >> (sh + 4)) & 0x03030303);
    }
}

// turbo3: elements 8r + l0 .. 8r + l0 + 3 (l0 = 0 or 4) for every r of a block come from the
// same four bytes of each of its three byte rows qs[8k + l0 ..], k = 0..2. The rows are read
// once and interleaved into 16-bit lanes (lane n = row k byte n | row k+1 byte n << 8): the
// low pair (rows 0, 1) holds index bits 0..15 of w_l, so r <= 3 (bits 3r..3r+2 <= 11); the
// high pair (rows 1, 2) bits 8..23, so r >= 4. Three 4-byte loads per block and thread, where
// ggml_cuda_turbo_sel4 reads two per four elements.
struct ggml_cuda_turbo3_rows {
    uint32_t lo01, hi01;  // lanes of elements l0, l0+1 (lo) and l0+2, l0+3 (hi), rows 0 | 1 << 8
    uint32_t lo12, hi12;  // the same for rows 1 | 2 << 8
};

// rows 0 and 1 (upper = false) or 1 and 2 (upper = true) of block x at byte l0 (0 or 4)
template <bool lower, bool upper>
static __device__ __forceinline__ ggml_cuda_turbo3_rows ggml_cuda_turbo3_load_rows(const block_turbo3_0 * x, const int l0) {
    ggml_cuda_turbo3_rows rows = {0, 0, 0, 0};
    uint32_t q0 = 0, q1, q2 = 0;
    ggml_cuda_memcpy_1<4, 2>(&q1, x->qs + QK_TURBO/8 + l0);
    if constexpr (lower) {
        ggml_cuda_memcpy_1<4, 2>(&q0, x->qs + l0);
        rows.lo01 = __byte_perm(q0, q1, 0x5140);
        rows.hi01 = __byte_perm(q0, q1, 0x7362);
    }
    if constexpr (upper) {
        ggml_cuda_memcpy_1<4, 2>(&q2, x->qs + 2*QK_TURBO/8 + l0);
        rows.lo12 = __byte_perm(q1, q2, 0x5140);
        rows.hi12 = __byte_perm(q1, q2, 0x7362);
    }
    return rows;
}

// nibble n of the result = index of element 8r + l0 + n; upper = (r >= 4), r < 8
static __device__ __forceinline__ uint32_t ggml_cuda_turbo3_sel4_rows(const ggml_cuda_turbo3_rows & rows, const int r, const bool upper) {
    const int      sh = upper ? 3*r - 8 : 3*r;
    const uint32_t lo = ((upper ? rows.lo12 : rows.lo01) >> sh) & 0x00070007;  // l0 at bit 0, l0+1 at bit 16
    const uint32_t hi = ((upper ? rows.hi12 : rows.hi01) >> sh) & 0x00070007;  // l0+2, l0+3
    const uint32_t t  = lo | (hi << 8);                                         // l0, l0+2, l0+1, l0+3 at bits 0, 8, 16, 24
    return t | (t >> 12);
}

// nibble n of the result (n = 0..3) = index of element o + n of block vb; o % 4 == 0
template <ggml_type type>
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_sel4(const void * vb, const int o) {
    if constexpr (type == GGML_TYPE_TURBO4_0) {
        const block_turbo4_0 * x = (const block_turbo4_0 *) vb;
        uint32_t w;
        ggml_cuda_memcpy_1<4, 2>(&w, x->qs + (o % (QK_TURBO/2)));
        return ggml_cuda_turbo_nibsel((w >> (o >= QK_TURBO/2 ? 4 : 0)) & 0x0F0F0F0F);  // index of o+n in byte n
    } else if constexpr (type == GGML_TYPE_TURBO3_0) {
        // element 8r + l: bits 3r..3r+2 of qs[l] | qs[l+8] << 8 | qs[l+16] << 16, i.e. in byte
        // row b0 = 3r/8 from bit sh = 3r - 8 b0, continuing into row b1 (= b0 unless it straddles)
        const block_turbo3_0 * x = (const block_turbo3_0 *) vb;
        const int r  = o / 8;
        const int b0 = (3*r) / 8;
        const int b1 = (3*r + 2) / 8;
        const int sh = 3*r - 8*b0;
        uint32_t q0, q1;
        ggml_cuda_memcpy_1<4, 2>(&q0, x->qs + 8*b0 + o % 8);
        ggml_cuda_memcpy_1<4, 2>(&q1, x->qs + 8*b1 + o % 8);
        // 16-bit lanes q0[n] | q1[n] << 8, shifted: element o+n's index in the low 3 bits of its lane
        const uint32_t lo = (__byte_perm(q0, q1, 0x5140) >> sh) & 0x00070007;  // o at bit 0, o+1 at bit 16
        const uint32_t hi = (__byte_perm(q0, q1, 0x7362) >> sh) & 0x00070007;  // o+2 at bit 0, o+3 at bit 16
        const uint32_t t  = lo | (hi << 8);                                     // o, o+2, o+1, o+3 at bits 0, 8, 16, 24
        return t | (t >> 12);
    } else if constexpr (type == GGML_TYPE_TURBO2_0) {
        const block_turbo2_0 * x = (const block_turbo2_0 *) vb;
        uint32_t w;
        ggml_cuda_memcpy_1<4, 2>(&w, x->qs + (o % 16));
        return ggml_cuda_turbo_nibsel((w >> (2*(o / 16))) & 0x03030303);
    } else {
        static_assert(type == GGML_TYPE_TURBO4_0, "not a turbo type");
        return 0;
    }
}

// byte n of the result = byte (index in nibble n of sel) of the table t0 | t1 << 32 | ...
template <int levels>
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_lookup4(const uint32_t sel,
        const uint32_t t0, const uint32_t t1, const uint32_t t2, const uint32_t t3) {
    if constexpr (levels == 16) {
        const uint32_t lo = __byte_perm(t0, t1, sel);  // entries 0..7 (bit 3 of the selector is ignored)
        const uint32_t hi = __byte_perm(t2, t3, sel);  // entries 8..15
        return __byte_perm(lo, hi, 0x3210 | ((sel & 0x8888) >> 1));
    } else if constexpr (levels == 8) {
        return __byte_perm(t0, t1, sel);
    } else {
        static_assert(levels == 4, "levels");
        return __byte_perm(t0, 0, sel);
    }
}

// Compile-time tables: the generated codebook as int8 (K) and as fp16 byte planes (V).
template <ggml_type type> struct ggml_cuda_turbo_fa_codebook;
template <> struct ggml_cuda_turbo_fa_codebook<GGML_TYPE_TURBO4_0> { static constexpr float c[16] = GGML_TURBO4_CENTROIDS; static constexpr float step7 = GGML_TURBO4_CODE7_STEP; };
template <> struct ggml_cuda_turbo_fa_codebook<GGML_TYPE_TURBO3_0> { static constexpr float c[8]  = GGML_TURBO3_CENTROIDS; static constexpr float step7 = GGML_TURBO3_CODE7_STEP; };
template <> struct ggml_cuda_turbo_fa_codebook<GGML_TYPE_TURBO2_0> { static constexpr float c[4]  = GGML_TURBO2_CENTROIDS; static constexpr float step7 = GGML_TURBO2_CODE7_STEP; };

// IEEE fp16 bits of a float in fp16's normal range, round to nearest even (every centroid is)
static constexpr __host__ __device__ uint32_t ggml_cuda_turbo_half_bits(const float f) {
    double a = f < 0 ? -(double) f : (double) f;
    int e = 0;
    while (a >= 2.0) { a /= 2.0; ++e; }
    while (a < 1.0)  { a *= 2.0; --e; }
    const double m = (a - 1.0) * 1024.0;
    uint32_t mi = (uint32_t) m;
    const double frac = m - (double) mi;
    if (frac > 0.5 || (frac == 0.5 && (mi & 1))) {
        ++mi;
    }
    if (mi == 1024) {
        mi = 0;
        ++e;
    }
    return (f < 0 ? 0x8000u : 0u) | ((uint32_t) (e + 15) << 10) | mi;
}

// the 7-bit codes' offset: a code is q + 64 (|q| <= 63), so every byte of a plane-4 table is under 0x80
static constexpr int ggml_cuda_turbo_code7_bias = 64;

// the step of the integer centroids q = round(c / step), |q| <= qmax. 127 (int8): max|c| / 127. 63 (the
// 7-bit codes of plane 4): the generated GGML_TURBOn_CODE7_STEP, the step of least expected squared error
// (tqgguf.reference.codebook.code_step; turbo4: 0.43 % of the quantizer's own MSE, max|c| / 127 adds 0.49 %)
template <ggml_type type, int qmax = 127>
static constexpr __host__ __device__ float ggml_cuda_turbo_i8_step() {
    static_assert(qmax == 127 || qmax == 63, "integer codes: int8 or 7-bit");
    typedef ggml_cuda_turbo_fa_codebook<type> cb;
    return qmax == 63 ? cb::step7 : cb::c[ggml_cuda_turbo_traits<type>::levels - 1] / 127.0f;  // ascending, symmetric
}

// word w of a byte table (entries 4w .. 4w+3; 0 beyond the codebook). plane: 0 = int8
// centroid, 1 = low byte of the fp16 centroid, 2 = its high byte, 3 = the int8 centroid + 128
// (offset binary: as the low byte of the fp16 bits 0x64xx it is the value 1024 + 128 + q),
// 4 = the 7-bit code q + 64 (|q| <= 63, step GGML_TURBOn_CODE7_STEP: every byte under 0x80), 16 entries only,
// words 0, 1 = entries 0..7 and words 2, 3 = entries 15..8 (reversed: byte k of words 2, 3 is entry
// 15 - k), for the two sign-mode PRMT of ggml_cuda_turbo_fa_mma_lookup7
template <ggml_type type, int plane>
static constexpr __host__ __device__ uint32_t ggml_cuda_turbo_table_word(const int w) {
    typedef ggml_cuda_turbo_fa_codebook<type> cb;
    constexpr int levels = ggml_cuda_turbo_traits<type>::levels;
    static_assert(plane != 4 || levels == 16, "7-bit codes: 16-entry tables");
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k) {
        const int i = plane == 4 && w >= 2 ? 23 - (4*w + k) : 4*w + k;
        if (i >= levels) {
            break;
        }
        uint32_t byte = 0;
        if (plane == 4) {
            const float q = cb::c[i] / ggml_cuda_turbo_i8_step<type, 63>();
            byte = (uint32_t) ((int) (q >= 0.0f ? q + 0.5f : q - 0.5f) + ggml_cuda_turbo_code7_bias);
        } else if (plane == 0 || plane == 3) {
            const float q = cb::c[i] / ggml_cuda_turbo_i8_step<type>();
            byte = (uint32_t) (uint8_t) (int8_t) (int) (q >= 0.0f ? q + 0.5f : q - 0.5f);
            byte ^= plane == 3 ? 0x80 : 0;  // q + 128 for int8 q
        } else {
            byte = (ggml_cuda_turbo_half_bits(cb::c[i]) >> (plane == 1 ? 0 : 8)) & 0xFF;
        }
        r |= byte << (8*k);
    }
    return r;
}

template <ggml_type type, int plane>
static __device__ __forceinline__ uint32_t ggml_cuda_turbo_table4(const uint32_t sel) {
    constexpr uint32_t t0 = ggml_cuda_turbo_table_word<type, plane>(0);
    constexpr uint32_t t1 = ggml_cuda_turbo_table_word<type, plane>(1);
    constexpr uint32_t t2 = ggml_cuda_turbo_table_word<type, plane>(2);
    constexpr uint32_t t3 = ggml_cuda_turbo_table_word<type, plane>(3);
    return ggml_cuda_turbo_lookup4<ggml_cuda_turbo_traits<type>::levels>(sel, t0, t1, t2, t3);
}

// K.Q for one K row (vec_dot_KQ_t): Q as q8_1 (Q_q8: 4 int8 values per int, Q_ds: the
// (d, sum) of their 32-value block), nthreads threads per row; int i of a thread is
// Q int nthreads*i + t (t = its lane in the row), elements 4(nthreads*i + t) .. +3.
template <ggml_type type_K, int D, int nthreads>
static __device__ __forceinline__ float vec_dot_fattn_vec_KQ_turbo(
    const char * __restrict__ K_c, const void * __restrict__ Q_v, const int * __restrict__ Q_q8, const void * __restrict__ Q_ds_v) {
    typedef ggml_cuda_turbo_traits<type_K> tt;
    GGML_UNUSED(Q_v);

    const typename tt::block * K = (const typename tt::block *) K_c;
    const float2 * Q_ds = (const float2 *) Q_ds_v;
    const uint32_t t = nthreads == WARP_SIZE ? threadIdx.x : threadIdx.x % nthreads;
    constexpr int n_int = D/sizeof(int)/nthreads;  // Q ints per thread
    float sum = 0.0f;

    if constexpr (nthreads <= QK_TURBO/8 && type_K != GGML_TYPE_TURBO3_0) {
        // a thread's ints q and q + per_block/2 of block m are elements o.. and o + 32.. with
        // o = 4(nthreads*q + t) < 32: one load (ggml_cuda_turbo_fa_nthreads_KQ)
        constexpr int per_block = QK_TURBO/4/nthreads;  // a thread's ints in one block
        static_assert(n_int % per_block == 0, "whole blocks");
#pragma unroll
        for (int m = 0; m < n_int/per_block; ++m) {
            const typename tt::block * b = K + m;
            int sa = 0;  // elements < 32 of the block: one q8_1 block of Q, one scale
            int sb = 0;  // elements >= 32
#pragma unroll
            for (int q = 0; q < per_block/2; ++q) {
                const int ia = m*per_block + q;
                const int ib = ia + per_block/2;
                uint32_t sel_a, sel_b;
                ggml_cuda_turbo_sel4_pair<type_K>(b, 4*(nthreads*q + t), sel_a, sel_b);
                sa = ggml_cuda_dp4a((int) ggml_cuda_turbo_table4<type_K, 0>(sel_a), Q_q8[ia], sa);
                sb = ggml_cuda_dp4a((int) ggml_cuda_turbo_table4<type_K, 0>(sel_b), Q_q8[ib], sb);
            }
            sum += __half2float(b->d) * (Q_ds[m*per_block].x * (float) sa + Q_ds[m*per_block + per_block/2].x * (float) sb);
        }
    } else if constexpr (nthreads <= QK_TURBO/8 && type_K == GGML_TYPE_TURBO3_0) {
        // a thread's int q of block m is elements 8r + l0 .. +3 with r = (nthreads/2)q + t/2,
        // l0 = 4(t % 2): the three byte rows are read once per block. Ints of one q8_1 block
        // (32 elements: q < per_block/2) share Q's scale, so their dp4a sums add as integers.
        constexpr int per_block = QK_TURBO/4/nthreads;
        static_assert(n_int % per_block == 0 && (nthreads/2)*(per_block/2) == 4, "whole blocks, r >= 4 from q = per_block/2");
#pragma unroll
        for (int m = 0; m < n_int/per_block; ++m) {
            const block_turbo3_0 * b = K + m;
            const ggml_cuda_turbo3_rows rows = ggml_cuda_turbo3_load_rows<true, true>(b, 4*(t % 2));
            int s[2] = {0, 0};
#pragma unroll
            for (int q = 0; q < per_block; ++q) {
                const uint32_t sel = ggml_cuda_turbo3_sel4_rows(rows, (nthreads/2)*q + t/2, q >= per_block/2);
                s[q >= per_block/2] = ggml_cuda_dp4a((int) ggml_cuda_turbo_table4<type_K, 0>(sel), Q_q8[m*per_block + q], s[q >= per_block/2]);
            }
            sum += __half2float(b->d) * (Q_ds[m*per_block].x * (float) s[0] + Q_ds[m*per_block + per_block/2].x * (float) s[1]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < n_int; ++i) {
            const uint32_t e = 4*(nthreads*i + t);  // first of the 4 elements
            const typename tt::block * b = K + e / QK_TURBO;

            const int v    = (int) ggml_cuda_turbo_table4<type_K, 0>(ggml_cuda_turbo_sel4<type_K>(b, e % QK_TURBO));
            const int sumi = ggml_cuda_dp4a(v, Q_q8[i], 0);
            sum += __half2float(b->d) * Q_ds[i].x * (float) sumi;
        }
    }
    return sum * ggml_cuda_turbo_i8_step<type_K>();
}

// V (dequantize_V_t): ne consecutive values from element i0 of the row (i0 % ne == 0, ne % 4 == 0).
// The centroids come from the fp16 byte planes in registers (no memory access); on NVIDIA GPUs
// the kernel accumulates V in fp32 (T = float), so they are widened and scaled in fp32.
template <ggml_type type_V, typename T, int ne>
static __device__ __forceinline__ void dequantize_V_turbo(const void * __restrict__ vx, void * __restrict__ dst, const int64_t i0) {
    static_assert(ne % 4 == 0, "4 values per lookup");
    const uint32_t u = (uint32_t) i0;  // < 2^32: an element of one row
    const typename ggml_cuda_turbo_traits<type_V>::block * b = (const typename ggml_cuda_turbo_traits<type_V>::block *) vx + u / QK_TURBO;
    const int o = (int) (u % QK_TURBO);
#pragma unroll
    for (int l0 = 0; l0 < ne; l0 += 4) {
        uint32_t sel;
        if constexpr (type_V == GGML_TYPE_TURBO3_0) {
            const int  e     = o + l0;
            const bool upper = e >= QK_TURBO/2;  // r >= 4
            const ggml_cuda_turbo3_rows rows = upper ? ggml_cuda_turbo3_load_rows<false, true>(b, e % 8)
                                                     : ggml_cuda_turbo3_load_rows<true, false>(b, e % 8);
            sel = ggml_cuda_turbo3_sel4_rows(rows, e / 8, upper);
        } else {
            sel = ggml_cuda_turbo_sel4<type_V>(b, o + l0);
        }
        const uint32_t lo  = ggml_cuda_turbo_table4<type_V, 1>(sel);
        const uint32_t hi  = ggml_cuda_turbo_table4<type_V, 2>(sel);
        const uint32_t c01 = __byte_perm(lo, hi, 0x5140);  // fp16 centroids of elements 0, 1
        const uint32_t c23 = __byte_perm(lo, hi, 0x7362);  // elements 2, 3
        if constexpr (std::is_same_v<T, half>) {
            const half2 d2 = __half2half2(b->d);
            ((half2 *) dst)[l0/2 + 0] = d2 * *((const half2 *) &c01);
            ((half2 *) dst)[l0/2 + 1] = d2 * *((const half2 *) &c23);
        } else {
            static_assert(std::is_same_v<T, float>, "bad type");
            const float  d   = __half2float(b->d);
            const float2 f01 = __half22float2(*((const half2 *) &c01));
            const float2 f23 = __half22float2(*((const half2 *) &c23));
            ((float *) dst)[l0 + 0] = d * f01.x;
            ((float *) dst)[l0 + 1] = d * f01.y;
            ((float *) dst)[l0 + 2] = d * f23.x;
            ((float *) dst)[l0 + 3] = d * f23.y;
        }
    }
}
