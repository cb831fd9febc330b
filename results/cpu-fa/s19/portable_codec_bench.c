// Issue 27: the portable turbo decoders alone (the code a CPU without the x86 paths runs), timed on
// 32768 random blocks per type: dequantize (the V side of the CPU decode) and the multi-head dot
// (the K side, ggml_turbo_vec_dot_multi's portable loop) for 1, 4 and 8 Q heads. Built by
// portable_codec_bench.sh, which includes a given revision's ggml-turbo.c (its static functions
// are what is timed). Prints the best of 5 repetitions in microseconds.
#include "ggml-turbo.c"

#include <stdio.h>
#include <time.h>

#define NB 32768

static block_turbo4_0 x4[NB];
static block_turbo3_0 x3[NB];
static block_turbo2_0 x2[NB];
static float out[QK_TURBO*NB];
static float q[8*QK_TURBO];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec*1e-9;
}

static void fill(void * x, size_t size, size_t block, int nb) {
    for (size_t i = 0; i < size; ++i) {
        ((uint8_t *) x)[i] = (uint8_t) rand();
    }
    for (int i = 0; i < nb; ++i) {  // a finite, positive scale in every block header
        const ggml_fp16_t d = GGML_FP32_TO_FP16(0.01f + (float) (rand() % 100)/100.0f);
        memcpy((uint8_t *) x + i*block, &d, sizeof d);
    }
}

#define BEST(expr) ({ double best = 1e30; for (int rep = 0; rep < 5; ++rep) { const double t = now(); expr; \
                      const double e = now() - t; best = e < best ? e : best; } best*1e6; })

#define RUN(N, x)                                                                                          \
    do {                                                                                                   \
        float s[TURBO_DOT_MULTI_MAX];                                                                      \
        const double deq = BEST(turbo##N##_dequantize_scalar(x, out, NB));                                 \
        const double d1 = BEST(for (int i = 0; i < NB; ++i) turbo##N##_dot_multi_scalar(x + i, q, QK_TURBO, 1, 1, s)); \
        const double d4 = BEST(for (int i = 0; i < NB; ++i) turbo##N##_dot_multi_scalar(x + i, q, QK_TURBO, 4, 1, s)); \
        const double d8 = BEST(for (int i = 0; i < NB; ++i) turbo##N##_dot_multi_scalar(x + i, q, QK_TURBO, 8, 1, s)); \
        printf("turbo%d  dequantize %8.0f us  dot 1 head %8.0f us  4 heads %8.0f us  8 heads %8.0f us\n",   \
               N, deq, d1, d4, d8);                                                                        \
        sink += s[0] + out[NB];                                                                            \
    } while (0)

int main(void) {
    srand(1);
    fill(x4, sizeof x4, sizeof x4[0], NB);
    fill(x3, sizeof x3, sizeof x3[0], NB);
    fill(x2, sizeof x2, sizeof x2[0], NB);
    for (size_t i = 0; i < sizeof q/sizeof q[0]; ++i) {
        q[i] = (float) (rand() % 2001 - 1000)/1000.0f;
    }
    float sink = 0.0f;
    printf("%d blocks of 64 values per call, best of 5\n", NB);
    RUN(4, x4);
    RUN(3, x3);
    RUN(2, x2);
    return sink == 12345.0f;  // keeps the results alive
}
