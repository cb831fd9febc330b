// Issue 27: the turbo codec on two architectures. The same inputs (4096 Gaussian blocks, fixed seed)
// through both encoders, dequantize_row and the 8-head dot (rows of 256 values), written raw to
// stdout; exits 1 when the 8-head dot differs from 8 single dots. cross_arch_check.sh builds it for
// x86-64 and aarch64 and compares the outputs.
#include "ggml-turbo.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#define NBLK 4096
static uint32_t rng = 12345u;
static float frand(void) { rng = rng*1664525u + 1013904223u; return ((rng >> 8) & 0xFFFFFF)/16777216.0f; }
static float gauss(void) { float u = frand() + 1e-7f, v = frand(); return sqrtf(-2.0f*logf(u))*cosf(6.2831853f*v); }
int main(void) {
    static float x[NBLK*64], y[NBLK*64], q[8*256], s[8];
    static uint8_t blk[NBLK*64];
    for (int i = 0; i < NBLK*64; ++i) x[i] = gauss()*(1.0f + (float)(i/64 % 7));
    for (int i = 0; i < 8*256; ++i) q[i] = gauss();
    void (*qz[3])(const float *, void *, int64_t) = { quantize_row_turbo4_0, quantize_row_turbo3_0, quantize_row_turbo2_0 };
    void (*qr[3])(const float *, void *, int64_t) = { quantize_row_turbo4_0_ref, quantize_row_turbo3_0_ref, quantize_row_turbo2_0_ref };
    void (*dq[3])(const void *, float *, int64_t) = { dequantize_row_turbo4_0, dequantize_row_turbo3_0, dequantize_row_turbo2_0 };
    void (*vd[3])(int, float *, size_t, const void *, size_t, const void *, size_t, int) =
        { ggml_vec_dot_turbo4_0_f32, ggml_vec_dot_turbo3_0_f32, ggml_vec_dot_turbo2_0_f32 };
    const size_t bs[3] = { 34, 26, 18 };
    const enum ggml_type ty[3] = { GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0 };
    for (int t = 0; t < 3; ++t) {
        for (int e = 0; e < 2; ++e) {
            (e ? qr[t] : qz[t])(x, blk, NBLK*64);
            fwrite(blk, 1, bs[t]*NBLK, stdout);
        }
        dq[t](blk, y, NBLK*64);
        fwrite(y, 4, NBLK*64, stdout);
        for (int r = 0; r + 4 <= NBLK; r += 4) {  // rows of 256 values, 8 heads
            ggml_turbo_vec_dot_multi(ty[t], 256, 8, s, blk + r*bs[t], q, 256);
            fwrite(s, 4, 8, stdout);
            for (int h = 0; h < 8; ++h) {
                float one; vd[t](256, &one, 0, blk + r*bs[t], 0, q + h*256, 0, 1);
                if (memcmp(&one, &s[h], 4) != 0) { fprintf(stderr, "type %d row %d head %d: multi != single\n", t, r, h); return 1; }
            }
        }
    }
    return 0;
}
void ggml_abort(const char * file, int line, const char * fmt, ...) { fprintf(stderr, "abort %s:%d %s\n", file, line, fmt); abort(); }
const char * ggml_type_name(enum ggml_type type) { (void) type; return "?"; }
size_t ggml_row_size(enum ggml_type type, int64_t ne) { return (size_t) (ne/64) * (type == GGML_TYPE_TURBO4_0 ? 34 : type == GGML_TYPE_TURBO3_0 ? 26 : 18); }
