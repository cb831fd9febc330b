// tqgguf: a host stand-in for ggml-cuda/common.cuh, so that the device functions of
// native/ggml/src/ggml-cuda/turbo.cuh compile with a C++ compiler and run on the CPU
// (tests/test_cuda_host.py). It defines only what those functions use, with CUDA's
// semantics: the CUDA qualifiers as nothing, threadIdx as a variable the caller sets (one
// emulated thread at a time), fp16 <-> fp32 as IEEE conversions, __byte_perm (the low 3 bits
// of each selector nibble pick one of the 8 bytes of y:x), dp4a (signed bytes), and the
// ggml-cuda helpers the functions call. Warp shuffles and barriers are never reached by the
// functions the check runs: they abort.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define GGML_CUDA_TURBO_HOST_CHECK 1  // turbo.cuh leaves out its kernel launches

#define GGML_COMMON_DECL_CPP
#include "ggml.h"
#include "ggml-common.h"  // ggml_half is uint16_t (the fp16 bits) in the C++ declaration

#define GGML_LOG_ERROR(...) fprintf(stderr, __VA_ARGS__)  // ggml-impl.h's logger, as plain stderr

#define WARP_SIZE 32

struct turbo_host_dim3 { unsigned int x = 0, y = 0, z = 0; };
#ifdef TURBO_HOST_EMUL_WARPS  // fa_dec_emul.cpp: one OS thread per CUDA thread, shuffles and barriers emulated there
inline thread_local turbo_host_dim3 threadIdx;
inline turbo_host_dim3 blockIdx, blockDim, gridDim;
#else
inline turbo_host_dim3 threadIdx, blockIdx, blockDim, gridDim;
#endif

struct float2 { float x, y; };
struct half { uint16_t bits; };
struct half2 { half x, y; };

static inline float turbo_host_h2f(const uint16_t h) {
    const uint32_t sign = (uint32_t) (h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    uint32_t f;
    if (exp == 0x1F) {
        f = sign | 0x7F800000u | (man << 13);
    } else if (exp != 0) {
        f = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        f = sign;
    } else {  // subnormal: normalise
        int e = -1;
        uint32_t m = man;
        do { m <<= 1; ++e; } while (!(m & 0x400));
        f = sign | ((uint32_t) (112 - e) << 23) | ((m & 0x3FF) << 13);
    }
    float r;
    memcpy(&r, &f, 4);
    return r;
}

static inline uint16_t turbo_host_f2h(const float v) {  // round to nearest even, IEEE
    uint32_t f;
    memcpy(&f, &v, 4);
    const uint32_t sign = (f >> 16) & 0x8000;
    const float a = std::fabs(v);
    if (std::isnan(v)) return (uint16_t) (sign | 0x7E00);
    if (a >= 65520.0f) return (uint16_t) (sign | 0x7C00);
    if (a < 6.103515625e-05f) {  // subnormal half: a multiple of 2^-24, rint is ties-to-even
        return (uint16_t) (sign | (uint32_t) std::nearbyint(a * 16777216.0f));
    }
    uint32_t af;
    memcpy(&af, &a, 4);
    const uint32_t exp = (af >> 23) - 112, man = af & 0x7FFFFF;
    uint32_t h = (exp << 10) | (man >> 13);
    const uint32_t rest = man & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
    return (uint16_t) (sign | h);
}

static inline float  __half2float(const uint16_t h) { return turbo_host_h2f(h); }
static inline float  __half2float(const half h) { return turbo_host_h2f(h.bits); }
static inline uint16_t __float2half_rn(const float v) { return turbo_host_f2h(v); }
static inline float2 __half22float2(const half2 h) { return { turbo_host_h2f(h.x.bits), turbo_host_h2f(h.y.bits) }; }
static inline half2  __half2half2(const uint16_t h) { return { { h }, { h } }; }
static inline half2 operator*(const half2 a, const half2 b) {  // one rounding, as __hmul2
    return { { turbo_host_f2h(turbo_host_h2f(a.x.bits) * turbo_host_h2f(b.x.bits)) },
             { turbo_host_f2h(turbo_host_h2f(a.y.bits) * turbo_host_h2f(b.y.bits)) } };
}

static inline half2 __hsub2(const half2 a, const half2 b) {  // one rounding per half
    return { { turbo_host_f2h(turbo_host_h2f(a.x.bits) - turbo_host_h2f(b.x.bits)) },
             { turbo_host_f2h(turbo_host_h2f(a.y.bits) - turbo_host_h2f(b.y.bits)) } };
}

static inline uint32_t __byte_perm(const uint32_t x, const uint32_t y, const uint32_t s) {
    const uint64_t b = (uint64_t) x | ((uint64_t) y << 32);
    uint32_t r = 0;
    for (int n = 0; n < 4; ++n) {
        r |= (uint32_t) ((b >> (8*((s >> (4*n)) & 7))) & 0xFF) << (8*n);
    }
    return r;
}

static inline int ggml_cuda_dp4a(const int a, const int b, int c) {
    for (int n = 0; n < 4; ++n) {
        c += (int) (int8_t) (a >> (8*n)) * (int) (int8_t) (b >> (8*n));
    }
    return c;
}

template <int nbytes, int alignment = 0>
static inline void ggml_cuda_memcpy_1(void * dst, const void * src) {
    if constexpr (alignment != 0) {
        if ((uintptr_t) src % alignment != 0) {
            fprintf(stderr, "ggml_cuda_memcpy_1<%d, %d>: source %p is not %d-byte aligned\n", nbytes, alignment, src, alignment);
            abort();
        }
    }
    memcpy(dst, src, nbytes);
}

[[noreturn]] static inline void turbo_host_unreachable(const char * what) {
    fprintf(stderr, "%s is not emulated\n", what);
    abort();
}
#ifndef TURBO_HOST_EMUL_WARPS
template <typename T> static inline T __shfl_xor_sync(unsigned, T, int, int = WARP_SIZE) { turbo_host_unreachable("__shfl_xor_sync"); }
template <typename T> static inline T __shfl_sync(unsigned, T, int, int = WARP_SIZE) { turbo_host_unreachable("__shfl_sync"); }
static inline void __syncthreads() { turbo_host_unreachable("__syncthreads"); }
#endif
static inline void ggml_cuda_pdl_sync() {}
static inline void ggml_cuda_pdl_lc() {}

// ggml-cuda's device table as far as turbo.cuh reads it: one device, nsm multiprocessors
// (132 as an H200 unless the caller sets it)
struct turbo_host_device_info { int nsm = 132; };
struct turbo_host_cuda_info { turbo_host_device_info devices[1]; };
inline turbo_host_cuda_info turbo_host_info;
static inline turbo_host_cuda_info & ggml_cuda_info() { return turbo_host_info; }
static inline int ggml_cuda_get_device() { return 0; }
