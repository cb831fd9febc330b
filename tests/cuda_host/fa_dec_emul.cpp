// tqgguf: the turbo FA decode kernel (native/ggml/src/ggml-cuda/turbo-fattn-dec.cuh) run on the
// CPU: one OS thread per CUDA thread of a block (128), warp shuffles and barriers emulated with
// std::barrier, blocks one after another, the KV split (gridDim.y) merged as upstream's
// flash_attn_combine_results does. The output is compared with attention in double precision
// on the dequantized K/V (d * c[idx]) and the unquantized Q. No GPU needed.
//
//   g++ -std=c++20 -O1 -pthread -ffp-contract=off -Itests/cuda_host -Inative/ggml/src/ggml-cuda -Inative/ggml/src
//       -I$TREE/ggml/src -I$TREE/ggml/include tests/cuda_host/fa_dec_emul.cpp -o fa_dec_emul
//   ./fa_dec_emul            (all cases; exit 1 on a failure)
#define TURBO_HOST_EMUL_WARPS 1
#include "common.cuh"

#include <barrier>
#include <cfloat>
#include <memory>
#include <random>
#include <thread>
#include <vector>

// ---- the CUDA pieces the kernel uses beyond tests/cuda_host/common.cuh
#define GGML_CUDA_RESTRICT __restrict__
#define FLASH_ATTN_AVAILABLE
#define FAST_FP16_AVAILABLE
#define FATTN_KQ_MAX_OFFSET (3.0f*0.6931f)
#define __align__(n) __attribute__((aligned(n)))
#define QI8_1 (QK8_1 / 4)
struct uint3 { unsigned int x, y, z; };
static inline float2 make_float2(const float a, const float b) { return { a, b }; }

static std::unique_ptr<std::barrier<>> emul_warp_bar[4];
static std::unique_ptr<std::barrier<>> emul_block_bar;
static uint64_t emul_slot[4][WARP_SIZE];

template <typename T>
static T emul_shfl(const T v, const int src_of_lane_xor, const bool is_xor) {
    const int w = threadIdx.y, l = threadIdx.x;
    static_assert(sizeof(T) <= 8, "shuffle width");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    emul_slot[w][l] = u;
    emul_warp_bar[w]->arrive_and_wait();
    const int src = is_xor ? (l ^ src_of_lane_xor) : src_of_lane_xor;
    const uint64_t r = emul_slot[w][src % WARP_SIZE];
    emul_warp_bar[w]->arrive_and_wait();
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int off, int = WARP_SIZE) { return emul_shfl(v, off, true); }
template <typename T> static inline T __shfl_sync(unsigned, T v, int src, int = WARP_SIZE) { return emul_shfl(v, src, false); }
static inline void __syncwarp() { emul_warp_bar[threadIdx.y]->arrive_and_wait(); }
static inline void __syncthreads() { emul_block_bar->arrive_and_wait(); }

template <int width = WARP_SIZE>
static inline float warp_reduce_sum(float x) {
    for (int off = width/2; off > 0; off >>= 1) {
        x += __shfl_xor_sync(0xFFFFFFFF, x, off, width);
    }
    return x;
}

static inline half2 make_half2(const float a, const float b) { return { { turbo_host_f2h(a) }, { turbo_host_f2h(b) } }; }
static inline half2 __float2half2_rn(const float a) { return make_half2(a, a); }
static inline half2 __hfma2(const half2 a, const half2 b, const half2 c) {  // a*b is exact in float; one rounding of the sum (close to the fused op)
    auto f = [](half x, half y, half z) {
        return half{ turbo_host_f2h((float) ((double) turbo_host_h2f(x.bits) * turbo_host_h2f(y.bits) + turbo_host_h2f(z.bits))) };
    };
    return { f(a.x, b.x, c.x), f(a.y, b.y, c.y) };
}

static inline float get_alibi_slope(const float max_bias, const uint32_t h, const uint32_t n_head_log2, const float m0, const float m1) {
    if (max_bias <= 0.0f) {
        return 1.0f;
    }
    const float base = h < n_head_log2 ? m0 : m1;
    const int   exph = h < n_head_log2 ? h + 1 : 2*(h - n_head_log2) + 1;
    return powf(base, exph);
}

// fattn-common.cuh's Q -> q8_1 of ni ints by the lanes of one warp (lane i: values 4i..4i+3;
// a q8_1 block = 8 lanes; every lane writes its int, lanes < ni their block's (d, sum))
template <typename Tds, int ni>
static inline void quantize_q8_1_to_shared(const float * __restrict__ x, const float scale, int * __restrict__ yq32, void * __restrict__ yds) {
    float vals[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int l = 0; l < 4; ++l) {
        vals[l] = (ni == WARP_SIZE || (int) threadIdx.x < ni) ? scale * x[4*threadIdx.x + l] : 0.0f;
    }
    float amax = fabsf(vals[0]);
    float sum  = vals[0];
    for (int l = 1; l < 4; ++l) {
        amax = fmaxf(amax, fabsf(vals[l]));
        sum += vals[l];
    }
    for (int mask = QI8_1/2; mask > 0; mask >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFF, amax, mask, 32));
        sum +=             __shfl_xor_sync(0xFFFFFFFF, sum,  mask, 32);
    }
    const float d = amax / 127;
    int q32 = 0;
    int8_t * q8 = (int8_t *) &q32;
    if (d != 0.0f) {
        for (int l = 0; l < 4; ++l) {
            q8[l] = (int8_t) roundf(vals[l] / d);
        }
    }
    yq32[threadIdx.x] = q32;
    if (threadIdx.x % QI8_1 == 0 && (ni == WARP_SIZE || (int) threadIdx.x < ni)) {
        ((float2 *) yds)[threadIdx.x/QI8_1] = { d, sum };
    }
}

// the tensor-core kernel's three warp-wide instructions (turbo-fattn-mma.cuh): every lane puts
// its fragments into the warp's slots, then computes its own part of the result from all of them
// (PTX ISA fragment layouts of mma.m16n8k32 s8, mma.m16n8k16 f16 and movmatrix.m8n8.trans.b16)
static uint32_t emul_frag[4][WARP_SIZE][10];

static inline half2 __floats2half2_rn(const float a, const float b) { return make_half2(a, b); }
static inline int __float2int_rn(const float x) { return (int) nearbyintf(x); }

// D (16x8) += A (16xK) * B (Kx8), K = 8 n, n elements per 32-bit register (4 int8, 2 fp16): A's
// registers hold rows g, g+8 at columns n t .. and K/2 + n t .., B's rows n t .. and K/2 + n t .. of
// column g (lane 4g + t); elem(word, j) is element j of a register, T the type the sums run in
template <int n, typename T, typename C>
static void emul_mma(C (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], T (*elem)(uint32_t, int)) {
    constexpr int K = 8*n;
    const int w = threadIdx.y, l = threadIdx.x;
    memcpy(emul_frag[w][l], a, 16);
    memcpy(emul_frag[w][l] + 4, b, 8);
    emul_warp_bar[w]->arrive_and_wait();
    T A[16][K], B[K][8];
    for (int L = 0; L < WARP_SIZE; ++L) {
        const int g = L/4, t = L%4;
        for (int j = 0; j < n; ++j) {
            const auto e = [&](int r) { return elem(emul_frag[w][L][r], j); };
            A[g][n*t + j] = e(0); A[g + 8][n*t + j] = e(1); A[g][K/2 + n*t + j] = e(2); A[g + 8][K/2 + n*t + j] = e(3);
            B[n*t + j][g] = e(4); B[K/2 + n*t + j][g] = e(5);
        }
    }
    emul_warp_bar[w]->arrive_and_wait();
    const int g = l/4, t = l%4;
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8*(i/2), col = 2*t + i%2;
        T acc = c[i];
        for (int k = 0; k < K; ++k) {
            acc += A[row][k]*B[k][col];
        }
        c[i] = (C) acc;
    }
}
static int    emul_s8(const uint32_t v, const int j)  { return (int) (int8_t) (v >> (8*j)); }
static double emul_f16(const uint32_t v, const int j) { return turbo_host_h2f((uint16_t) (v >> (16*j))); }
static void ggml_cuda_turbo_mma_s8(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])    { emul_mma<4>(c, a, b, emul_s8); }
static void ggml_cuda_turbo_mma_f16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { emul_mma<2>(c, a, b, emul_f16); }
static uint32_t ggml_cuda_turbo_movmatrix(const uint32_t x) {
    const int w = threadIdx.y, l = threadIdx.x;
    emul_frag[w][l][0] = x;
    emul_warp_bar[w]->arrive_and_wait();
    const int g = l/4, t = l%4;  // result: (X[2t][g], X[2t+1][g]); X[r][c] is half c%2 of lane 4r + c/2
    const uint32_t lo = (emul_frag[w][4*(2*t) + g/2][0]     >> (16*(g % 2))) & 0xFFFF;
    const uint32_t hi = (emul_frag[w][4*(2*t + 1) + g/2][0] >> (16*(g % 2))) & 0xFFFF;
    emul_warp_bar[w]->arrive_and_wait();
    return lo | (hi << 16);
}
// prmt.b32, default mode (PTX ISA): byte n = byte (c_n & 7) of b:a, or its sign replicated where c_n & 8;
// c_n = nibble n of c's low 16 bits (unlike __byte_perm, which defines c_n & 7 only)
static uint32_t ggml_cuda_turbo_prmt(const uint32_t a, const uint32_t b, const uint32_t c) {
    const uint64_t x = (uint64_t) a | ((uint64_t) b << 32);
    uint32_t r = 0;
    for (int n = 0; n < 4; ++n) {
        const uint32_t cn   = (c >> (4*n)) & 0xF;
        const uint32_t byte = (uint32_t) (x >> (8*(cn & 7))) & 0xFF;
        r |= (cn & 8 ? (byte & 0x80 ? 0xFFu : 0u) : byte) << (8*n);
    }
    return r;
}

#include "turbo-fattn-dec.cuh"

// ---- the test
template <ggml_type type>
static float turbo_value(const void * row, const int e) {  // element e of a row: d * c[idx] (q8_0: d * qs)
    if constexpr (type == GGML_TYPE_Q8_0) {
        const block_q8_0 * b = (const block_q8_0 *) row + e / QK8_0;
        return turbo_host_h2f(b->d) * b->qs[e % QK8_0];
    } else if constexpr (type == GGML_TYPE_F16) {
        return turbo_host_h2f(((const half *) row)[e].bits);
    } else {
    typedef ggml_cuda_turbo_traits<type> tt;
    const typename tt::block * b = (const typename tt::block *) row + e / QK_TURBO;
    constexpr float c4[16] = GGML_TURBO4_CENTROIDS;
    constexpr float c3[8]  = GGML_TURBO3_CENTROIDS;
    constexpr float c2[4]  = GGML_TURBO2_CENTROIDS;
    const int i = ggml_cuda_turbo_index<type>(b, e % QK_TURBO);
    const float c = type == GGML_TYPE_TURBO4_0 ? c4[i] : type == GGML_TYPE_TURBO3_0 ? c3[i] : c2[i];
    return turbo_host_h2f(b->d) * c;
    }
}

static const char * tname(const ggml_type t) {
    return t == GGML_TYPE_TURBO4_0 ? "turbo4" : t == GGML_TYPE_TURBO3_0 ? "turbo3" : t == GGML_TYPE_TURBO2_0 ? "turbo2" : t == GGML_TYPE_Q8_0 ? "q8_0" : t == GGML_TYPE_F16 ? "f16" : "?";
}

struct fa_case {
    int n_kv, nh_kv, gqa, nseq, P;
    bool mask, sinks;
    float max_bias;
    bool cells = false;  // the KV cache's layout: a cell's heads side by side (row stride = all heads)
};

template <int D, ggml_type tK, ggml_type tV, int VAR = 1>
static bool run_case(const fa_case & fc, std::mt19937 & rng) {
    typedef typename ggml_cuda_turbo_fa_mma_kb<tK>::block bK;  // (q8_0 K: 32 values a block)
    typedef typename ggml_cuda_turbo_traits<tV>::block bV;
    constexpr int qkK = ggml_cuda_turbo_fa_mma_kb<tK>::qk;
    const int nhq = fc.nh_kv*fc.gqa, nkv = fc.n_kv, nseq = fc.nseq;
    // the launcher's choice: 8 for a multiple of 8 and (tensor-core kernel) for a ratio of 3, 5, 6, 7
    const bool whole = VAR >= 4 && fc.gqa < 8 && (fc.gqa & (fc.gqa - 1)) != 0;
    const int G = VAR >= 4 && (fc.gqa % 8 == 0 || whole) ? 8 : fc.gqa % 4 == 0 ? 4 : fc.gqa % 2 == 0 ? 2 : 1;
    const int ng = whole ? fc.gqa : G;  // heads per block
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), ud(0.25f, 2.0f);
    // K/V [D/64 blocks, n_kv, nh_kv, nseq], Q [D, 1, nhq, nseq] f32, mask [n_kv, 1, 1, nseq] f16
    // dscale: q8_0's d at 1/64 of a turbo block's, so that its values (d q, |q| <= 127) span what the turbo codebooks'
    // do (d c, |c| <= ~2.7) and the scores stay in the range where a softmax is not one-hot
    auto fill = [&](auto * blocks, size_t n, const float dscale) {
        if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(blocks)>>, half>) {  // f16 K: values in (-2, 2)
            for (size_t i = 0; i < n; ++i) blocks[i].bits = turbo_host_f2h(2.0f*u(rng));
            return;
        } else
        for (size_t i = 0; i < n; ++i) {
            uint8_t * p = (uint8_t *) &blocks[i];
            for (size_t k = 0; k < sizeof(blocks[i]); ++k) p[k] = (uint8_t) byte(rng);
            blocks[i].d = turbo_host_f2h(dscale * ud(rng) * (byte(rng) & 1 ? 1.0f : -1.0f));
        }
    };
    const size_t nbK = (size_t) D/qkK * nkv * fc.nh_kv * nseq;
    const size_t nbV = (size_t) D/64 * nkv * fc.nh_kv * nseq;
    std::vector<bK> K(nbK);
    std::vector<bV> V(nbV);
    fill(K.data(), nbK, tK == GGML_TYPE_Q8_0 ? 1.0f/64 : 1.0f);
    fill(V.data(), nbV, 1.0f);
    std::vector<float> Q((size_t) D * nhq * nseq);
    for (auto & q : Q) q = u(rng);
    std::vector<half> mask((size_t) nkv * nseq);
    for (auto & m : mask) { const int r = byte(rng); m.bits = r < 20 ? 0xFC00 /* -inf */ : turbo_host_f2h(u(rng)); }
    std::vector<float> sinks(nhq);
    for (auto & s : sinks) s = 2.0f*u(rng);
    const float scale = 1.0f/sqrtf((float) D);

    const uint32_t n_head_log2 = 1u << (uint32_t) floorf(log2f((float) nhq));
    const float m0 = powf(2.0f, -(fc.max_bias) / n_head_log2);
    const float m1 = powf(2.0f, -(fc.max_bias / 2.0f) / n_head_log2);

    const int32_t nb01 = D*4, nb02 = D*4, nb03 = D*4*nhq;
    const int32_t rK = (D/qkK)*sizeof(bK), rV = (D/64)*sizeof(bV);
    const int32_t nb11 = fc.cells ? rK*fc.nh_kv : rK, nb12 = fc.cells ? rK : rK*nkv; const int64_t nb13 = (int64_t) rK*nkv*fc.nh_kv;
    const int32_t nb21 = fc.cells ? rV*fc.nh_kv : rV, nb22 = fc.cells ? rV : rV*nkv; const int64_t nb23 = (int64_t) rV*nkv*fc.nh_kv;
    const int32_t nb31 = nkv*2; const int64_t nb33 = nb31;

    const int P = fc.P;
    std::vector<float> parts((size_t) nseq*nhq*P*D, 0.0f);
    std::vector<float2> meta((size_t) nseq*nhq*P);
    gridDim = { 1, (unsigned) P, (unsigned) (nhq/ng*nseq) };
    blockDim = { 32, 4, 1 };
    decltype(&flash_attn_ext_turbo_dec<D, 1, tK, tV, 1>) kernel;
    if constexpr (VAR >= 4) {  // the tensor-core kernel (5: staged, 6: 4 blocks per SM)
        // the launcher's configuration for VAR (ggml_cuda_turbo_fa_dec in turbo-fattn-dec.cuh)
        constexpr bool q8 = tK == GGML_TYPE_Q8_0 || tK == GGML_TYPE_F16;  // q8_0 / f16 K: their code at each head dim
        constexpr bool h3 = tK == GGML_TYPE_TURBO3_0 || tV == GGML_TYPE_TURBO3_0;
        constexpr bool h2 = tK == GGML_TYPE_TURBO2_0 || tV == GGML_TYPE_TURBO2_0;
        static_assert(D != 64 || q8 || VAR == 18 || VAR == 19 || VAR == 20, "hd 64, turbo K: the tensor-core kernel with 18, 19 or 20");
        static_assert(VAR != 21 || (D == 256 && !q8 && (h3 || h2)), "variant 21: hd 256, turbo pairs with turbo3 or turbo2");
        static_assert(VAR != 19 || h3, "variant 19: pairs with turbo3");
        static_assert(VAR != 20 || h2, "variant 20: pairs with turbo2");
        static_assert(D != 256 || q8 || !h2 || VAR == 21, "hd 256, turbo pairs with turbo2: variant 21 (the vector kernel otherwise)");
        // turbo3 / turbo2 as index words: the launcher's predicates (hd 256: 21's code for turbo K, 16's without for q8_0 / f16)
        constexpr bool t3 = h3 && ggml_cuda_turbo_fa_t3_words(D, q8, VAR);
        constexpr bool t2 = h2 && (D == 256 ? !q8 : ggml_cuda_turbo_fa_t2_words(VAR));
        constexpr bool plain = D == 64 || t3 || t2 || (q8 && D == 256);  // rows in their tile, int8 V, no early V, no aligned words
        constexpr bool t4t4 = tK == GGML_TYPE_TURBO4_0 && tV == GGML_TYPE_TURBO4_0;
        constexpr bool st = !q8 && !plain && VAR == 5;
        constexpr int  mb = plain ? (D == 256 || q8 ? 2 : 4) : VAR == 6 || VAR == 10 ? 4 : VAR >= 7 ? 2 : 3;  // (launch bounds: no effect here)
        constexpr bool q8aw = q8 && D == 128 && tK == GGML_TYPE_Q8_0 && tV == GGML_TYPE_TURBO4_0 && VAR != 10 && VAR != 16;  // 17's aligned words
        constexpr bool ev = plain ? false : q8 ? tV == GGML_TYPE_TURBO4_0 && VAR != 10 : (D == 256 && t4t4) || (VAR >= 7 && VAR <= 9) || VAR >= 11;
        constexpr bool nk = !q8 && !plain && D == 128 && ((VAR >= 8 && VAR <= 9) || VAR >= 11) && VAR != 15;  // (15: K in its tile)
        constexpr bool v8 = q8 || plain || VAR >= 9 || D == 256;  // V's centroids as int8
        constexpr bool aw = plain ? false : q8 ? q8aw : VAR >= 11 || D == 256;  // the rows' aligned words
        constexpr int  s7 = q8 || plain ? 0 : D == 256 || VAR == 12 || VAR == 14 || VAR == 15 || VAR >= 16 ? 3 : VAR == 13 ? 1 : 0;  // 7-bit codes, sign-mode lookups (K and V / K)
        constexpr bool kf = !q8 && !plain && D == 128 && (VAR == 14 || VAR >= 16);  // the first tile's K words before Q
        kernel = G == 8 ? flash_attn_ext_turbo_mma<D, 8, tK, tV, st, mb, ev, nk, v8, aw, s7, kf, t3, t2> : G == 4 ? flash_attn_ext_turbo_mma<D, 4, tK, tV, st, mb, ev, nk, v8, aw, s7, kf, t3, t2> :
                 G == 2 ? flash_attn_ext_turbo_mma<D, 2, tK, tV, st, mb, ev, nk, v8, aw, s7, kf, t3, t2> : flash_attn_ext_turbo_mma<D, 1, tK, tV, st, mb, ev, nk, v8, aw, s7, kf, t3, t2>;
    } else {
        kernel = G == 4 ? flash_attn_ext_turbo_dec<D, 4, tK, tV, VAR> : G == 2 ? flash_attn_ext_turbo_dec<D, 2, tK, tV, VAR> : flash_attn_ext_turbo_dec<D, 1, tK, tV, VAR>;
    }
    const uint3 ne01 = { 0, 0, 1 };
    for (unsigned z = 0; z < gridDim.z; ++z) {
        for (unsigned y = 0; y < gridDim.y; ++y) {
            blockIdx = { 0, y, z };
            for (auto & b : emul_warp_bar) b = std::make_unique<std::barrier<>>(32);
            emul_block_bar = std::make_unique<std::barrier<>>(128);
            std::vector<std::thread> th;
            for (int t = 0; t < 128; ++t) {
                th.emplace_back([&, t] {
                    threadIdx = { (unsigned) (t % 32), (unsigned) (t / 32), 0 };
                    kernel((const char *) Q.data(), (const char *) K.data(), (const char *) V.data(),
                        fc.mask ? (const char *) mask.data() : nullptr, fc.sinks ? (const char *) sinks.data() : nullptr, nullptr,
                        P > 1 ? parts.data() : parts.data(), meta.data(), scale, fc.max_bias, m0, m1, n_head_log2, 0.0f,
                        D, ne01, nhq, nseq, nb01, nb02, nb03,
                        D, nkv, fc.nh_kv, nseq, nb11, nb12, nb13, nb21, nb22, nb23,
                        fc.mask ? nkv : 0, 1, fc.mask ? nseq : 0, nb31, nb31, nb33);
                });
            }
            for (auto & t : th) t.join();
        }
    }
    // combine (flash_attn_combine_results) or the direct output
    std::vector<float> out((size_t) nseq*nhq*D);
    for (int s = 0; s < nseq; ++s) for (int h = 0; h < nhq; ++h) {
        const size_t j = (size_t) s*nhq + h;
        for (int i = 0; i < D; ++i) {
            if (P == 1) { out[j*D + i] = parts[j*D + i]; continue; }
            float kqmax = meta[j*P].x;
            for (int l = 1; l < P; ++l) kqmax = fmaxf(kqmax, meta[j*P + l].x);
            float num = 0.0f, den = 0.0f;
            for (int l = 0; l < P; ++l) {
                const float f = expf(meta[j*P + l].x - kqmax);
                num += f*parts[(j*P + l)*D + i];
                den += f*meta[j*P + l].y;
            }
            out[j*D + i] = num/den;
        }
    }
    // reference
    double err2 = 0.0, ref2 = 0.0, maxerr = 0.0;
    for (int s = 0; s < nseq; ++s) for (int h = 0; h < nhq; ++h) {
        const int hk = h / fc.gqa;
        const float slope = get_alibi_slope(fc.max_bias, h, n_head_log2, m0, m1);
        std::vector<double> sc(nkv);
        double mx = -1e300;
        for (int k = 0; k < nkv; ++k) {
            const char * Kr = (const char *) K.data() + s*nb13 + (int64_t) hk*nb12 + (int64_t) k*nb11;
            double dot = 0.0;
            for (int e = 0; e < D; ++e) dot += (double) Q[((size_t) s*nhq + h)*D + e] * turbo_value<tK>(Kr, e);
            dot *= scale;
            if (fc.mask) dot += slope*turbo_host_h2f(mask[(size_t) s*nkv + k].bits);
            sc[k] = dot;
            mx = std::max(mx, dot);
        }
        if (fc.sinks) mx = std::max(mx, (double) sinks[h]);
        double den = fc.sinks ? exp(sinks[h] - mx) : 0.0;
        std::vector<double> o(D, 0.0);
        for (int k = 0; k < nkv; ++k) {
            const double p = std::isinf(sc[k]) ? 0.0 : exp(sc[k] - mx);
            den += p;
            const char * Vr = (const char *) V.data() + s*nb23 + (int64_t) hk*nb22 + (int64_t) k*nb21;
            for (int e = 0; e < D; ++e) o[e] += p*turbo_value<tV>(Vr, e);
        }
        for (int e = 0; e < D; ++e) {
            const double r = o[e]/den, g = out[((size_t) s*nhq + h)*D + e];
            err2 += (r - g)*(r - g); ref2 += r*r; maxerr = std::max(maxerr, fabs(r - g));
        }
    }
    const double nmse = err2/ref2;
    const bool ok = nmse < 1e-4 && std::isfinite(nmse);  // measured ~1e-6; a wrong element mapping gives ~1e-2
    printf("%s VAR=%d D=%3d %s/%s kv=%4d kvh=%d gqa=%d G=%d seq=%d P=%d mask=%d sinks=%d alibi=%g cells=%d: NMSE %.3e max|err| %.3e\n",
        ok ? "OK  " : "FAIL", VAR, D, tname(tK), tname(tV), nkv, fc.nh_kv, fc.gqa, G, nseq, P, fc.mask, fc.sinks, fc.max_bias, fc.cells, nmse, maxerr);
    return ok;
}

static bool run_q8_cases(const fa_case (&cases)[7], std::mt19937 & rng) {
    bool ok = true;
    for (const fa_case & fc : cases) {
        ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 14>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 14>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 14>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_0, 14>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO2_0, 14>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    // f16 K (K.Q in the fp16 mma)
    for (const fa_case & fc : cases) {
        ok &= run_case<128, GGML_TYPE_F16, GGML_TYPE_TURBO4_0, 14>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_F16, GGML_TYPE_TURBO4_0, 14>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_F16, GGML_TYPE_TURBO4_0, 14>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_F16, GGML_TYPE_TURBO3_0, 14>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_F16, GGML_TYPE_TURBO2_0, 14>(cases[4], rng);
    // (above, 14: q8_0/turbo4 as aligned words, variant 17's code, the default since session 31; q8_0 / f16 K with turbo3
    // V: its index words, 19's.) Session 30's code for q8_0/turbo4 (variant 16 at hd 128, kept for A/B runs): every case
    for (const fa_case & fc : cases) {
        ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 16>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 16>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 16>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_0, 16>(cases[1], rng);
    // hd 256 (variant 16, the default there since session 31: V's words read in P.V)
    for (const fa_case & fc : cases) {
        ok &= run_case<256, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 16>(fc, rng);
        ok &= run_case<256, GGML_TYPE_F16, GGML_TYPE_TURBO4_0, 16>(fc, rng);
    }
    ok &= run_case<256, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 16>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<256, GGML_TYPE_F16, GGML_TYPE_TURBO4_0, 16>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<256, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_0, 16>(cases[6], rng);
    ok &= run_case<256, GGML_TYPE_F16, GGML_TYPE_TURBO2_0, 16>(cases[1], rng);
    return ok;
}

// hd 64 on the tensor-core kernel (variant 18; the default for q8_0 / f16 K since session 31, turbo K only when asked): a row
// is one block at a 2-byte aligned start
// (the contiguous cases: every other row; the cache's layout, cells: every other head), every pair
static bool run_hd64_cases(const fa_case (&cases)[7], std::mt19937 & rng) {
    bool ok = true;
    for (const fa_case & fc : cases) {
        ok &= run_case<64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 18>(fc, rng);
    }
    ok &= run_case<64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 18>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 18>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 18>({ 256, 3, 3, 1, 1, true, false, 8.0f, true }, rng);
    ok &= run_case<64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 18>(cases[6], rng);
    ok &= run_case<64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 18>(cases[1], rng);
    ok &= run_case<64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 18>(cases[6], rng);
    ok &= run_case<64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 18>(cases[6], rng);
    ok &= run_case<64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 18>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO4_0, 18>(cases[4], rng);
    for (const fa_case & fc : { cases[1], cases[6], fa_case{ 512, 2, 7, 2, 2, true, true, 0.0f, true } }) {
        ok &= run_case<64, GGML_TYPE_Q8_0, GGML_TYPE_TURBO4_0, 18>(fc, rng);
        ok &= run_case<64, GGML_TYPE_F16, GGML_TYPE_TURBO4_0, 18>(fc, rng);
    }
    ok &= run_case<64, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_0, 18>(cases[6], rng);
    ok &= run_case<64, GGML_TYPE_F16, GGML_TYPE_TURBO2_0, 18>(cases[0], rng);
    return ok;
}

// turbo3 K and V as index words (variant 19, the default for pairs with turbo3 since session 31): every case for turbo3/turbo3 at hd 128 and 64, the
// mixed pairs with turbo3 on one side
static bool run_t3_cases(const fa_case (&cases)[7], std::mt19937 & rng) {
    bool ok = true;
    for (const fa_case & fc : cases) {
        ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 19>(fc, rng);
        ok &= run_case< 64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 19>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 19>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 19>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case< 64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 19>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 19>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 19>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0, 19>(cases[4], rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO3_0, 19>(cases[6], rng);
    ok &= run_case< 64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 19>(cases[6], rng);
    ok &= run_case< 64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0, 19>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_0, 19>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_F16, GGML_TYPE_TURBO3_0, 19>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case< 64, GGML_TYPE_Q8_0, GGML_TYPE_TURBO3_0, 19>(cases[1], rng);
    return ok;
}

// turbo2 K and V as index words (variant 20, the default at hd 128 and for q8_0 / f16 K at hd 64 since session 32): every
// case for turbo2/turbo2 at hd 128 and 64, the mixed pairs with turbo2 on one side (turbo3 beside it as words too), and
// the default's number (14) on the pairs it now runs them for
static bool run_t2_cases(const fa_case (&cases)[7], std::mt19937 & rng) {
    bool ok = true;
    for (const fa_case & fc : cases) {
        ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 20>(fc, rng);
        ok &= run_case< 64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 20>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 20>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case< 64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 20>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO4_0, 20>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO2_0, 20>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0, 20>(cases[4], rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO3_0, 20>(cases[6], rng);
    ok &= run_case< 64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO2_0, 20>(cases[6], rng);
    ok &= run_case< 64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO3_0, 20>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_Q8_0, GGML_TYPE_TURBO2_0, 20>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_F16, GGML_TYPE_TURBO2_0, 20>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case< 64, GGML_TYPE_F16, GGML_TYPE_TURBO2_0, 20>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 14>(cases[4], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO2_0, 14>(cases[6], rng);
    ok &= run_case< 64, GGML_TYPE_Q8_0, GGML_TYPE_TURBO2_0, 14>(cases[1], rng);
    return ok;
}

// hd 256 for the turbo pairs other than turbo4/turbo4 (variant 21; the default since session 32 for the pairs without
// turbo2): every case for turbo3/turbo3, the others once or twice, and the default's number (14) on two pairs
static bool run_hd256_cases(const fa_case (&cases)[7], std::mt19937 & rng) {
    bool ok = true;
    for (const fa_case & fc : cases) {
        ok &= run_case<256, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 21>(fc, rng);
    }
    ok &= run_case<256, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 21>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<256, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 21>(cases[6], rng);
    ok &= run_case<256, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 21>(cases[1], rng);
    ok &= run_case<256, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 21>(cases[6], rng);
    ok &= run_case<256, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 21>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<256, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO2_0, 21>(cases[4], rng);
    ok &= run_case<256, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO4_0, 21>(cases[0], rng);
    ok &= run_case<256, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0, 21>(cases[1], rng);
    ok &= run_case<256, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO3_0, 21>(cases[6], rng);
    ok &= run_case<256, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 14>(cases[4], rng);
    ok &= run_case<256, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 14>(cases[1], rng);
    return ok;
}

int main() {
    std::mt19937 rng(26);
    bool ok = true;
    const char * only = getenv("FA_DEC_EMUL_VAR");  // one variant's cases alone (e.g. 4; q8: the q8_0 K cases), for working on it
    const bool all = only == nullptr || *only == '\0';
    const fa_case cases[] = {
        { 256, 2, 4, 1, 1, true,  false, 0.0f },
        { 512, 1, 4, 2, 2, true,  true,  0.0f },
        { 256, 2, 2, 1, 3, true,  false, 0.0f },
        { 256, 1, 3, 1, 1, true,  false, 0.0f },
        { 256, 1, 8, 1, 2, true,  false, 8.0f },
        { 256, 1, 4, 1, 1, false, false, 0.0f },
        { 256, 3, 4, 2, 2, true,  false, 0.0f, true },
    };
    static const struct { const char * name; bool (*run)(const fa_case (&)[7], std::mt19937 &); } sets[] = {
        { "q8", run_q8_cases }, { "18", run_hd64_cases }, { "19", run_t3_cases }, { "20", run_t2_cases }, { "21", run_hd256_cases },
    };
    for (const auto & set : sets) {
        if (all || strcmp(only, set.name) != 0) {
            continue;
        }
        ok = set.run(cases, rng);
        printf("%s\n", ok ? "all OK" : "FAILURES");
        return ok ? 0 : 1;
    }
    if (all) {
        for (const fa_case & fc : cases) {
            ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0>(fc, rng);
            ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0>(fc, rng);
            ok &= run_case< 64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0>(fc, rng);
        }
        ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0>(cases[0], rng);
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0>(cases[1], rng);
        ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0>(cases[0], rng);
        ok &= run_case< 64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0>(cases[1], rng);
        ok &= run_case< 64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0>(cases[4], rng);
        // the staged variants (rows copied to shared memory a tile ahead; VAR 3 differs in launch
        // bounds only): every case for turbo4 and turbo3 at hd 128 and turbo4 at hd 64 (34-byte rows:
        // 2-byte aligned starts), one each for the other pairs
        for (const fa_case & fc : cases) {
            ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 2>(fc, rng);
            ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 2>(fc, rng);
            ok &= run_case< 64, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 2>(fc, rng);
        }
        ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 2>(cases[6], rng);
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 2>(cases[6], rng);
        ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0, 2>(cases[1], rng);
        ok &= run_case< 64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 2>(cases[6], rng);
        ok &= run_case< 64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 2>(cases[6], rng);
        ok &= run_case< 64, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 2>(cases[6], rng);
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 3>(cases[6], rng);
        ok &= run_case< 64, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO3_0, 3>(cases[1], rng);
    }
    // the tensor-core kernel (VAR 4, 5): turbo4 K and V at hd 128, every case, and GQA 8 (G = 8)
    for (const fa_case & fc : cases) {  // (FA_DEC_EMUL_VAR=4 runs these and VAR 5 alone)
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 4>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 4>({ 384, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    for (const fa_case & fc : cases) {  // and staged (VAR 5)
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 5>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 5>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    // the other turbo pairs through the same kernel (the decode kernel's index code)
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 4>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 5>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 5>(cases[4], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 5>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 4>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 5>(cases[1], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO2_0, 4>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO3_0, 5>(cases[0], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 6>(cases[1], rng);  // 4's code at other launch bounds
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 7>(cases[6], rng);  // V words loaded before K.Q
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 7>(cases[4], rng);
    for (const fa_case & fc : cases) {  // next tile's K words loaded during this one (VAR 8): every case
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 8>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 8>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    for (const fa_case & fc : cases) {  // V's centroids as int8 (VAR 9): every case
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 9>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 9>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 9>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    for (const fa_case & fc : cases) {  // 9 with the rows' aligned words (VAR 11): every case
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 11>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 11>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 11>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    for (const fa_case & fc : cases) {  // 11 with 7-bit codes looked up in PRMT's sign mode (VAR 12): every case
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 12>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 12>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 12>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    for (const fa_case & fc : cases) {  // 12 with the first tile's K words loaded before Q (VAR 14): every case
        ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 14>(fc, rng);
    }
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 14>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 14>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    // variant 15 (12 with K read in its tile), the one tensor-core variant at hd 256 (turbo4 K and V, a row as two
    // 68-byte halves): every case at hd 256, one at hd 128
    for (const fa_case & fc : cases) {
        ok &= run_case<256, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 15>(fc, rng);
    }
    ok &= run_case<256, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 15>({ 640, 2, 8, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<256, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 15>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 15>(cases[6], rng);
    // q8_0 and f16 K with a turbo V (session 30): K's values as K.Q's A operand (q8_0: int8, a scale per 32 dims; f16 in
    // the fp16 mma); every case with turbo4 V (its words loaded early), one each with turbo3 and turbo2 V
    ok &= run_q8_cases(cases, rng);
    ok &= run_hd64_cases(cases, rng);
    ok &= run_t3_cases(cases, rng);
    ok &= run_t2_cases(cases, rng);
    ok &= run_hd256_cases(cases, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 13>(cases[1], rng);  // K alone (VAR 13)
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 13>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 10>(cases[1], rng);  // int8 V (VAR 10), its words read in P.V (no early V)
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 10>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 10>({ 256, 1, 3, 1, 1, true, false, 8.0f }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 10>(cases[1], rng);  // int8 V, each row looked up alone
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 10>(cases[6], rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO2_0, 10>(cases[4], rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, 10>(cases[0], rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 10>({ 256, 2, 7, 1, 2, false, true, 0.0f }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO3_0, 10>(cases[6], rng);
    // a GQA ratio of 3, 5, 6, 7 in one G = 8 block (the whole group of a K/V head), every variant's code
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 8>({ 512, 2, 7, 2, 2, true, true, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 8>({ 256, 3, 3, 1, 1, true, false, 8.0f }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO4_0, 4>({ 256, 2, 6, 1, 3, true, true, 0.0f }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO3_0, 6>({ 384, 1, 5, 2, 2, true, false, 0.0f, true }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO2_0, GGML_TYPE_TURBO4_0, 6>({ 256, 2, 7, 1, 2, false, true, 0.0f }, rng);
    ok &= run_case<128, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO4_0, 7>({ 256, 2, 7, 1, 1, true, false, 0.0f }, rng);
    printf("%s\n", ok ? "all OK" : "FAILURES");
    return ok ? 0 : 1;
}
