// tqgguf: C entry points around the Metal turbo functions, compiled with metal_shim.h
// (tests/test_metal_shim.py builds this as a shared library and calls it through ctypes).
// The Metal headers are included unchanged, exactly as kernels/dequantize.h and
// kernels/quantize.h include them on a Mac.
#include "metal_shim.h"

#include "ggml-turbo-common.h"
#include "turbo-dequantize.h"
#include "turbo-quantize.h"

#include <cstring>

namespace {

// blocks[0..nb) of one type; the type4x4 form walked as the kernels do (chunk i of the row:
// block i/nl, il = i%nl), half results stored as their 16 bits
template <typename block_t, typename T4x4, void (*deq)(device const block_t *, short, thread T4x4 &)>
void run_4x4(const void * src, void * dst, int64_t nb) {
    const block_t * x = (const block_t *) src;
    T4x4 * y = (T4x4 *) dst;
    for (int64_t i = 0; i < nb*NL_TURBO; ++i) {
        T4x4 reg;
        deq(x + i/NL_TURBO, (short) (i%NL_TURBO), reg);
        y[i] = reg;
    }
}

template <typename block_t, typename T4, void (*deq)(device const block_t *, short, thread T4 &)>
void run_t4(const void * src, void * dst, int64_t nb) {
    const block_t * x = (const block_t *) src;
    T4 * y = (T4 *) dst;
    for (int64_t i = 0; i < nb*NL_TURBO_4; ++i) {
        T4 reg;
        deq(x + i/NL_TURBO_4, (short) (i%NL_TURBO_4), reg);
        y[i] = reg;
    }
}

template <typename block_t, void (*q)(device const float *, device block_t &)>
void run_quantize(const float * x, void * dst, int64_t nb) {
    block_t * y = (block_t *) dst;
    for (int64_t i = 0; i < nb; ++i) {
        q(x + i*QK_TURBO, y[i]);
    }
}

}  // namespace

#define TQ_SHIM_TYPE(N)                                                                                  \
extern "C" void tq_metal_quantize_turbo##N(const float * x, void * y, int64_t nb) {                      \
    run_quantize<block_turbo##N##_0, quantize_turbo##N##_0>(x, y, nb);                                  \
}                                                                                                        \
extern "C" void tq_metal_dequantize_turbo##N##_f32(const void * x, void * y, int64_t nb) {              \
    run_4x4<block_turbo##N##_0, float4x4, dequantize_turbo##N##_0<float4x4>>(x, y, nb);                  \
}                                                                                                        \
extern "C" void tq_metal_dequantize_turbo##N##_f16(const void * x, void * y, int64_t nb) {              \
    run_4x4<block_turbo##N##_0, half4x4, dequantize_turbo##N##_0<half4x4>>(x, y, nb);                    \
}                                                                                                        \
extern "C" void tq_metal_dequantize_t4_turbo##N##_f32(const void * x, void * y, int64_t nb) {           \
    run_t4<block_turbo##N##_0, float4, dequantize_turbo##N##_0_t4<float4>>(x, y, nb);                    \
}                                                                                                        \
extern "C" void tq_metal_dequantize_t4_turbo##N##_f16(const void * x, void * y, int64_t nb) {           \
    run_t4<block_turbo##N##_0, half4, dequantize_turbo##N##_0_t4<half4>>(x, y, nb);                      \
}

TQ_SHIM_TYPE(4)
TQ_SHIM_TYPE(3)
TQ_SHIM_TYPE(2)
