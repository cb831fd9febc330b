// tqgguf: Metal encoder of the turbo KV-cache types (the cache write: SET_ROWS, CPY f32->turbo).
//
// Included from kernels/quantize.h right after quantize_q8_0, after turbo-dequantize.h (through
// dequantize.h: tables and turbo_metal_traits). One thread encodes one 64-value block.
//
// It is ggml-turbo.c's scale-search encoder (turbo_encode_block_scalar, search = 1) operation
// for operation, so a Metal cache write stores the CPU's bytes:
//   - sums of 64 values in the CPU's canonical order (8 lane sums over rows of 8, then
//     ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)));
//   - every product and sum a separate IEEE binary32 operation: they go through turbo_mul /
//     turbo_add, one operation per statement, in functions compiled with
//     `#pragma METAL fp math_mode(safe)` (as upstream's quantize_q8_0), so no FMA contraction
//     and no reassociation; sqrt and division are precise::sqrt / precise::divide (correctly
//     rounded, not the fast-math approximations);
//   - the scale rounds to fp16 with round-to-nearest-even ((half) d) after saturating at
//     +-65504.
// Checked off-Mac: tests/test_metal_shim.py compiles this text as C++ and compares its bytes
// with quantize_row_turboN_0 of the built libggml-base on >= 100k blocks. Not checked there:
// how Apple's GPU compiler treats these operations (see README, "Metal").

static float turbo_mul(float a, float b) {
#pragma METAL fp math_mode(safe)
    const float r = a * b;
    return r;
}

static float turbo_add(float a, float b) {
#pragma METAL fp math_mode(safe)
    const float r = a + b;
    return r;
}

// the CPU's tree over the 8 lane sums
static float turbo_tree(thread const float * acc) {
#pragma METAL fp math_mode(safe)
    const float a0 = turbo_add(acc[0], acc[4]);
    const float a1 = turbo_add(acc[1], acc[5]);
    const float a2 = turbo_add(acc[2], acc[6]);
    const float a3 = turbo_add(acc[3], acc[7]);
    return turbo_add(turbo_add(a0, a2), turbo_add(a1, a3));
}

// index of the nearest centroid = number of decision boundaries strictly below v
template <typename block_t>
static int turbo_nearest(float v) {
#pragma METAL fp math_mode(safe)
    typedef turbo_metal_traits<block_t> tt;
    int i = 0;
    for (int step = tt::levels/2; step >= 1; step /= 2) {
        i += (v > tt::b(i + step - 1)) ? step : 0;
    }
    return i;
}

// indices of x * s packed into dst with scale d (layout: ggml-turbo-common.h)
static void turbo_pack(device const float * x, float s, float d, device block_turbo4_0 & dst) {
    dst.d = (half) d;
    for (int j = 0; j < QK_TURBO/2; ++j) {
        const int lo = turbo_nearest<block_turbo4_0>(turbo_mul(x[j], s));
        const int hi = turbo_nearest<block_turbo4_0>(turbo_mul(x[j + QK_TURBO/2], s));
        dst.qs[j] = (uint8_t) (lo | (hi << 4));
    }
}

static void turbo_pack(device const float * x, float s, float d, device block_turbo3_0 & dst) {
    dst.d = (half) d;
    for (int l = 0; l < 8; ++l) {
        uint32_t w = 0;
        for (int r = 0; r < 8; ++r) {
            w |= (uint32_t) turbo_nearest<block_turbo3_0>(turbo_mul(x[8*r + l], s)) << (3*r);
        }
        dst.qs[l]      = (uint8_t) (w & 255);
        dst.qs[l + 8]  = (uint8_t) ((w >> 8) & 255);
        dst.qs[l + 16] = (uint8_t) (w >> 16);
    }
}

static void turbo_pack(device const float * x, float s, float d, device block_turbo2_0 & dst) {
    dst.d = (half) d;
    for (int j = 0; j < 16; ++j) {
        int q = 0;
        for (int r = 0; r < 4; ++r) {
            q |= turbo_nearest<block_turbo2_0>(turbo_mul(x[j + 16*r], s)) << (2*r);
        }
        dst.qs[j] = (uint8_t) q;
    }
}

template <typename block_t>
void quantize_turbo(device const float * src, device block_t & dst) {
#pragma METAL fp math_mode(safe)
    typedef turbo_metal_traits<block_t> tt;

    float acc[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
    for (int r = 0; r < 8; ++r) {
        for (int l = 0; l < 8; ++l) {
            acc[l] = turbo_add(acc[l], turbo_mul(src[8*r + l], src[8*r + l]));
        }
    }
    const float n = precise::sqrt(turbo_tree(acc));
    if (n == 0.0f) {
        turbo_pack(src, 0.0f, 0.0f, dst);  // every index the one nearest 0, d = 0
        return;
    }
    const float inv = precise::divide(1.0f, n);

    // strictly greater wins, so the first of equal scores is kept; a block whose scores are
    // all NaN keeps best_k = -1 (the CPU then leaves indices 0 and d = 0/1)
    float best_score = -1.0f, best_dot = 0.0f, best_den = 1.0f;
    int   best_k     = -1;
    for (int k = 0; k < GGML_TURBO_SEARCH_STEPS; ++k) {
        const float s = turbo_mul(inv, turbo_inv_grid_metal[k]);
        float acc_dot[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
        float acc_den[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
        for (int r = 0; r < 8; ++r) {
            for (int l = 0; l < 8; ++l) {
                const float xv = src[8*r + l];
                const float c  = tt::c(turbo_nearest<block_t>(turbo_mul(xv, s)));
                acc_dot[l] = turbo_add(acc_dot[l], turbo_mul(xv, c));
                acc_den[l] = turbo_add(acc_den[l], turbo_mul(c, c));
            }
        }
        const float dot   = turbo_tree(acc_dot);
        const float den   = turbo_tree(acc_den);
        const float score = precise::divide(turbo_mul(dot, dot), den);
        if (score > best_score) {
            best_score = score;
            best_dot   = dot;
            best_den   = den;
            best_k     = k;
        }
    }
    float d = precise::divide(best_dot, best_den);
    d = d > 65504.0f ? 65504.0f : (d < -65504.0f ? -65504.0f : d);  // fp16 range, as on the CPU
    if (best_k < 0) {
        dst.d = (half) d;
        for (int j = 0; j < (int) sizeof(dst.qs); ++j) {
            dst.qs[j] = 0;
        }
        return;
    }
    turbo_pack(src, turbo_mul(inv, turbo_inv_grid_metal[best_k]), d, dst);
}

void quantize_turbo4_0(device const float * src, device block_turbo4_0 & dst) {
    quantize_turbo(src, dst);
}

void quantize_turbo3_0(device const float * src, device block_turbo3_0 & dst) {
    quantize_turbo(src, dst);
}

void quantize_turbo2_0(device const float * src, device block_turbo2_0 & dst) {
    quantize_turbo(src, dst);
}
