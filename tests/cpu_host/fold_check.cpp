// tqgguf: K centering `full`'s decode fold (native/src/llama-kv-center.cpp, llama_k_center_fold_table and
// llama_k_center_fold_mask) on ggml's CPU backend, the engine's own libllama, against the same sums in double
// precision. The table is R(pos)·uA as the graph makes it (cos and sin of pos·θ per RoPE pair, 1 on the
// unrotated dims) for random positions; q is Gaussian, the pair tensor [D, N_HEAD_KV, 4] (slice 0 bA, 2 the
// partner's coefficient, 3 the partner's dim: RoPE's NORM pairs (2i, 2i+1) on even K/V heads, NEOX pairs
// (i, i + n_rot/2) on odd ones, the 8 last dims unrotated) Gaussian so that c = scale · M q is at the
// coefficients' size in Qwen2.5 (tens); the mask is 0 up to a causal limit per token and -inf after.
//
//   fold_check D N_HEAD N_HEAD_KV N_TOK N_KV N_VALID N_THREADS
//
// Prints two numbers: the largest error of the table (w less its mean over the cells, in tiles of 16 cells)
// and of the mask term beyond its one F16 rounding (half an F16 ulp of the value), each relative to the
// largest sum of absolute products behind one value (the scale of F32 rounding); exits 1 when a masked cell is
// not -inf or a visible one not finite.
#include "ggml.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

ggml_tensor * llama_k_center_fold_table(ggml_context * ctx, ggml_tensor * w);
ggml_tensor * llama_k_center_fold_mask(ggml_context * ctx, ggml_tensor * table, ggml_tensor * q, ggml_tensor * pair,
                                       ggml_tensor * mask, float scale);

// half an F16 ulp at x (the most one rounding to F16 moves x), subnormal spacing below 2^-14
static double half_ulp_f16(double x) {
    const double a = std::fabs(x);
    return a < std::ldexp(1.0, -14) ? std::ldexp(1.0, -25) : std::ldexp(1.0, std::ilogb(a) - 11);
}

int main(int argc, char ** argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s D N_HEAD N_HEAD_KV N_TOK N_KV N_VALID N_THREADS\n", argv[0]);
        return 2;
    }
    const int D = atoi(argv[1]), nh = atoi(argv[2]), nkvh = atoi(argv[3]), nt = atoi(argv[4]), nkv = atoi(argv[5]);
    const int nvalid = atoi(argv[6]), nth = atoi(argv[7]);
    if (nkvh < 1 || nh % nkvh != 0) {
        fprintf(stderr, "N_HEAD %d is not a multiple of N_HEAD_KV %d\n", nh, nkvh);
        return 2;
    }
    const int G = nh / nkvh;
    const float kq_scale = 1.0f / std::sqrt((float) D);
    const int T = 16, ntiles = (nkv + T - 1)/T, n_rot = D - 8;  // 8 dims RoPE leaves alone
    ggml_init_params ip = { (size_t) 4*(2*D*nkv + T*D*ntiles + D*nh*nt + D*nkvh*4 + nkv*nt + 2*nkv*nt*nh) + (16u << 20), nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, nkv);
    ggml_tensor * q  = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, nh, nt);
    ggml_tensor * bp = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, nkvh, 4);
    ggml_tensor * m = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nkv, nt);
    std::mt19937 rng(21);
    std::normal_distribution<float> nd(0.0f, 30.0f);
    std::uniform_int_distribution<int> pos_d(0, 32767);
    float * wd = (float *) w->data;
    for (int r = 0; r < nkv; ++r) {
        const int pos = pos_d(rng);
        for (int i = 0; i < n_rot/2; ++i) {  // pair (2i, 2i+1) at angle pos·θ_i, θ_i = 10000^(-2i/n_rot)
            const double a = pos*std::pow(10000.0, -2.0*i/n_rot);
            wd[r*D + 2*i] = (float) std::cos(a);
            wd[r*D + 2*i + 1] = (float) std::sin(a);
        }
        for (int j = n_rot; j < D; ++j) {
            wd[r*D + j] = 1.0f;
        }
    }
    std::normal_distribution<float> n1(0.0f, 4.0f);
    for (int i = 0; i < D*nh*nt; ++i) {
        ((float *) q->data)[i] = n1(rng);
    }
    float * pd = (float *) bp->data;  // element (j, kvh, slice) at (slice*nkvh + kvh)*D + j
    for (int kvh = 0; kvh < nkvh; ++kvh) {
        for (int j = 0; j < D; ++j) {
            const bool neox = kvh % 2, rot = j < n_rot;
            const int  f = neox ? (j < n_rot/2 ? j : j - n_rot/2) : j - j % 2, sd = neox ? f + n_rot/2 : f + 1;
            pd[(0*nkvh + kvh)*D + j] = nd(rng);
            pd[(1*nkvh + kvh)*D + j] = 0.0f;  // bB: not read by the op
            pd[(2*nkvh + kvh)*D + j] = rot ? nd(rng) : 0.0f;
            pd[(3*nkvh + kvh)*D + j] = (float) (!rot ? j : j == f ? sd : f);
        }
    }
    // c[t][h][j] = scale · (bA_j q_j + s_j q_partner) in double, from K/V head h / G
    std::vector<double> c((size_t) D*nh*nt), ca((size_t) D*nh*nt);  // ca: scale · (|bA q| + |s q|), c's F32 rounding scale
    for (int t = 0; t < nt; ++t) {
        for (int h = 0; h < nh; ++h) {
            const float * qh = (const float *) q->data + (t*nh + h)*D;
            const int kvh = h/G;
            for (int j = 0; j < D; ++j) {
                const double a = (double) pd[kvh*D + j]*qh[j];
                const double b = (double) pd[(2*nkvh + kvh)*D + j]*qh[(int) pd[(3*nkvh + kvh)*D + j]];
                c[((size_t) t*nh + h)*D + j] = kq_scale*(a + b);
                ca[((size_t) t*nh + h)*D + j] = kq_scale*(std::fabs(a) + std::fabs(b));
            }
        }
    }
    for (int t = 0; t < nt; ++t) {
        for (int r = 0; r < nkv; ++r) {
            ((float *) m->data)[t*nkv + r] = r < nvalid - (nt - 1 - t) ? 0.0f : -INFINITY;
        }
    }
    ggml_tensor * tab = llama_k_center_fold_table(ctx, w);
    ggml_tensor * e   = llama_k_center_fold_mask(ctx, tab, q, bp, m, kq_scale);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, e);
    if (ggml_graph_compute_with_ctx(ctx, gf, nth) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        return 1;
    }
    if (tab->ne[0] != T*D || tab->ne[1] != ntiles || e->ne[0] != nkv || e->ne[1] != nt || e->ne[2] != nh || e->type != GGML_TYPE_F16) {
        fprintf(stderr, "shapes: table [%lld, %lld], e [%lld, %lld, %lld]\n", (long long) tab->ne[0], (long long) tab->ne[1],
                (long long) e->ne[0], (long long) e->ne[1], (long long) e->ne[2]);
        return 1;
    }
    std::vector<double> mean(D, 0.0);
    for (int r = 0; r < nkv; ++r) {
        for (int j = 0; j < D; ++j) {
            mean[j] += wd[r*D + j];
        }
    }
    double err_tab = 0.0;
    const float * td = (const float *) tab->data;
    for (int j = 0; j < D; ++j) {
        mean[j] /= nkv;
        for (int r = 0; r < ntiles*T; ++r) {
            const double want = r < nkv ? wd[r*D + j] - mean[j] : 0.0;
            err_tab = std::max(err_tab, std::fabs(td[(r/T)*T*D + j*T + r%T] - want));
        }
    }
    double err = 0.0, scale = 0.0;
    const ggml_fp16_t * ed = (const ggml_fp16_t *) e->data;
    for (int h = 0; h < nh; ++h) {
        for (int t = 0; t < nt; ++t) {
            const double * ch = c.data() + ((size_t) t*nh + h)*D, * cha = ca.data() + ((size_t) t*nh + h)*D;
            for (int r = 0; r < nkv; ++r) {
                double s = 0.0, sa = 0.0;
                for (int j = 0; j < D; ++j) {
                    s  += ch[j]*(wd[r*D + j] - mean[j]);
                    sa += (std::fabs(ch[j]) + cha[j])*std::fabs(wd[r*D + j] - mean[j]);
                }
                const float mk = ((const float *) m->data)[t*nkv + r], got = ggml_fp16_to_fp32(ed[(h*nt + t)*nkv + r]);
                if (std::isinf(mk)) {
                    if (!(std::isinf(got) && got < 0)) {
                        fprintf(stderr, "cell %d token %d head %d: masked, got %g\n", r, t, h, got);
                        return 1;
                    }
                    continue;
                }
                if (!std::isfinite(got)) {
                    fprintf(stderr, "cell %d token %d head %d: visible, got %g\n", r, t, h, got);
                    return 1;
                }
                // beyond the one F16 rounding; c's own F32 error (scale · Σ_k |M q|, 2^-24 each) enters sa's scale
                err = std::max(err, std::fabs(got - s) - std::max(half_ulp_f16(s), half_ulp_f16(got)));
                scale = std::max(scale, sa);
            }
        }
    }
    printf("%.3e %.3e\n", err_tab, err/scale);
    ggml_free(ctx);
    return 0;
}
