// tqgguf: just enough of the Metal Shading Language for our Metal turbo code to compile as C++
// on a machine without Apple's compiler (tests/test_metal_shim.py). Not a Metal emulator:
// it gives the same source text C++ meanings that match MSL for what that text uses:
//   address spaces  device / thread / constant / threadgroup -> nothing (one flat memory)
//   half            _Float16 (IEEE binary16; float -> half rounds to nearest even, as MSL's
//                   default conversion; half -> float is exact)
//   vectors         float4 / half4: 4 elements, operator[], explicit converting cast
//   matrices        float4x4 / half4x4: 4 columns of 4, m[i] is column i, m[i][k] its row k;
//                   the explicit cast converts element by element, as MSL's matrix cast
//   builtins        precise::sqrt, precise::divide (correctly rounded, std:: on IEEE hosts)
//   kernels         `kernel` -> nothing (a kernel is a plain function the test calls once per
//                   thread of the grid it emulates); uint3 / ushort3 with .x .y .z and [];
//                   the [[...]] attributes of kernel parameters are ignored (-Wno-attributes)
// `#pragma METAL ...` lines are unknown pragmas to g++/clang++ and ignored (-Wno-unknown-pragmas).
#pragma once

#include <cmath>
#include <cstdint>

#define device
#define thread
#define constant
#define threadgroup
#define kernel

typedef unsigned int   uint;
typedef unsigned short ushort;

typedef _Float16 half;
typedef half ggml_half;

template <typename T, int N>
struct metal_vec {
    T v[N];
    metal_vec() = default;
    template <typename U>
    explicit metal_vec(const metal_vec<U, N> & o) {
        for (int i = 0; i < N; ++i) {
            v[i] = (T) o.v[i];
        }
    }
    T & operator[](int i) { return v[i]; }
    const T & operator[](int i) const { return v[i]; }
};

template <typename T>
struct metal_mat4x4 {
    metal_vec<T, 4> col[4];
    metal_mat4x4() = default;
    template <typename U>
    explicit metal_mat4x4(const metal_mat4x4<U> & o) {
        for (int i = 0; i < 4; ++i) {
            col[i] = metal_vec<T, 4>(o.col[i]);
        }
    }
    metal_vec<T, 4> & operator[](int i) { return col[i]; }
    const metal_vec<T, 4> & operator[](int i) const { return col[i]; }
};

template <typename T>
struct metal_vec3 {
    T x, y, z;
    T operator[](int i) const { return i == 0 ? x : (i == 1 ? y : z); }
};

typedef metal_vec3<uint>    uint3;
typedef metal_vec3<ushort>  ushort3;

typedef metal_vec<float, 4> float4;
typedef metal_vec<half, 4>  half4;
typedef metal_mat4x4<float> float4x4;
typedef metal_mat4x4<half>  half4x4;

static_assert(sizeof(half) == 2 && sizeof(half4) == 8 && sizeof(float4x4) == 64 && sizeof(half4x4) == 32,
              "the shim's types must have Metal's sizes");

namespace precise {
inline float sqrt(float x) { return std::sqrt(x); }
inline float divide(float x, float y) { return x / y; }
}
