// tqgguf: runs the device functions of native/ggml/src/ggml-cuda/turbo.cuh on the CPU
// (through the stand-in common.cuh beside this file) on blocks given by the caller, and
// writes what they compute; tests/test_cuda_host.py compares it with the numpy reference.
//
//   turbo_host_check TYPE NBLK IN OUT
//
// TYPE: turbo4_0, turbo3_0 or turbo2_0. IN: NBLK raw blocks of TYPE, then NBLK*64 int8 Q
// values and NBLK*2 float32 Q scales (q8_1: one per 32 values). OUT (float32 unless said):
//   index      NBLK*64 int32   ggml_cuda_turbo_index
//   deq        NBLK*64         dequantize_turbo (v.x element iqs, v.y element iqs + 32)
//   v_f32      NBLK*64         dequantize_V_turbo<float, 4> at every i0 = 4k of the row
//   v_f16      NBLK*64         dequantize_V_turbo<half, 4>, widened
//   rows       NBLK*64         ggml_cuda_turbo_dequant_quarter, quarters 0..3 of every block put where
//                              ggml_cuda_turbo_quarter_run says (what k_turbo_to stores; NaN where nothing went)
//   kq         per (D, nthreads), D in {64, 128, 256}, nthreads in {2, 4, 8, 16, 32} up to D/4: NBLK*64/D row sums of
//              vec_dot_fattn_vec_KQ_turbo over the nthreads threads of a row
// Exit status 2 on bad arguments.
#include "turbo.cuh"

#include <string>
#include <vector>

template <ggml_type type>
static void run(const int nblk, const uint8_t * blocks, const int8_t * q, const float * qd, FILE * out) {
    typedef typename ggml_cuda_turbo_traits<type>::block block;
    const block * x = (const block *) blocks;
    const int n = nblk*QK_TURBO;
    std::vector<int32_t> index(n);
    std::vector<float> deq(n), v32(n), v16(n), rows(n, NAN);
    float c[ggml_cuda_turbo_traits<type>::levels];
    for (int i = 0; i < ggml_cuda_turbo_traits<type>::levels; ++i) {
        c[i] = ggml_cuda_turbo_traits<type>::c(i);
    }
    for (int ib = 0; ib < nblk; ++ib) {
        for (int j = 0; j < QK_TURBO; ++j) {
            index[ib*QK_TURBO + j] = ggml_cuda_turbo_index<type>(x + ib, j);
        }
        for (int iqs = 0; iqs < QK_TURBO/2; ++iqs) {
            float2 v;
            dequantize_turbo<type>(x, ib, iqs, v);
            deq[ib*QK_TURBO + iqs] = v.x;
            deq[ib*QK_TURBO + iqs + QK_TURBO/2] = v.y;
        }
        for (int q = 0; q < 4; ++q) {
            float v[16];
            ggml_cuda_turbo_dequant_quarter<type>(x + ib, q, c, v);
            for (int r = 0; r < 2; ++r) {
                memcpy(&rows[ib*QK_TURBO + ggml_cuda_turbo_quarter_run<type>(q, r)], v + 8*r, 8*sizeof(float));
            }
        }
    }
    for (int i0 = 0; i0 < n; i0 += 4) {
        dequantize_V_turbo<type, float, 4>(x, v32.data() + i0, i0);
        half2 h[2];
        dequantize_V_turbo<type, half, 4>(x, h, i0);
        for (int k = 0; k < 2; ++k) {
            const float2 f = __half22float2(h[k]);
            v16[i0 + 2*k] = f.x;
            v16[i0 + 2*k + 1] = f.y;
        }
    }
    fwrite(index.data(), 4, n, out);
    fwrite(deq.data(), 4, n, out);
    fwrite(v32.data(), 4, n, out);
    fwrite(v16.data(), 4, n, out);
    fwrite(rows.data(), 4, n, out);

    // Q as the kernel holds it: thread t's int i is Q int nthreads*i + t (4 int8 values), its
    // (d, sum) the scale of that int's 32-value block
    auto kq = [&](auto D_c, auto nthreads_c) {
        constexpr int D = decltype(D_c)::value, nthreads = decltype(nthreads_c)::value;
        constexpr int n_int = D/4/nthreads;
        std::vector<float> sums(n/D);
        for (int row = 0; row < n/D; ++row) {
            const char * K_row = (const char *) (x + row*(D/QK_TURBO));
            float sum = 0.0f;
            for (int t = 0; t < nthreads; ++t) {
                int q_i32[n_int];
                float2 q_ds[n_int];
                for (int i = 0; i < n_int; ++i) {
                    const int qi = nthreads*i + t;  // int of the row
                    memcpy(&q_i32[i], q + row*D + 4*qi, 4);
                    q_ds[i] = { qd[(row*D + 4*qi)/32], 0.0f };
                }
                threadIdx.x = t;
                sum += vec_dot_fattn_vec_KQ_turbo<type, D, nthreads>(K_row, nullptr, q_i32, q_ds);
            }
            sums[row] = sum;
        }
        fwrite(sums.data(), 4, sums.size(), out);
    };
    auto per_d = [&](auto D_c) {  // the kernel gives a row at most D/4 threads (one Q int each)
        kq(D_c, std::integral_constant<int, 2>());
        kq(D_c, std::integral_constant<int, 4>());
        kq(D_c, std::integral_constant<int, 8>());
        kq(D_c, std::integral_constant<int, 16>());
        if constexpr (decltype(D_c)::value >= 128) {
            kq(D_c, std::integral_constant<int, 32>());
        }
    };
    per_d(std::integral_constant<int, 64>());
    per_d(std::integral_constant<int, 128>());
    per_d(std::integral_constant<int, 256>());
}

// gqa D K_TYPE V_TYPE Q_HEADS KV_HEADS N_KV STREAMS NSM [MAX_BIAS]: the Q heads per block that
// the FA vector kernel would take at one query (ggml_cuda_turbo_fa_gqa_cols), printed
static int gqa(char ** argv) {
    auto type = [](const std::string & t) {
        return t == "turbo4_0" ? GGML_TYPE_TURBO4_0 : t == "turbo3_0" ? GGML_TYPE_TURBO3_0 : t == "turbo2_0" ? GGML_TYPE_TURBO2_0 :
               t == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    };
    const int D = atoi(argv[2]);
    ggml_tensor Q = {}, K = {}, dst = {};
    Q.ne[0] = D; Q.ne[1] = 1; Q.ne[2] = atoi(argv[5]); Q.ne[3] = atoi(argv[8]);
    K.ne[0] = D; K.ne[1] = atoi(argv[7]); K.ne[2] = atoi(argv[6]); K.ne[3] = Q.ne[3];
    dst.src[0] = &Q; dst.src[1] = &K;
    const float params[3] = { 1.0f, argv[10] ? (float) atof(argv[10]) : 0.0f, 0.0f };  // scale, max_bias, softcap
    memcpy(dst.op_params, params, sizeof(params));
    turbo_host_info.devices[0].nsm = atoi(argv[9]);
    printf("%d\n", ggml_cuda_turbo_fa_gqa_cols(D, type(argv[3]), type(argv[4]), &dst));
    return 0;
}

int main(int argc, char ** argv) {
    if (argc >= 10 && std::string(argv[1]) == "gqa") {
        return gqa(argv);
    }
    if (argc != 5) {
        fprintf(stderr, "usage: %s turbo4_0|turbo3_0|turbo2_0 NBLK IN OUT\n", argv[0]);
        return 2;
    }
    const int nblk = atoi(argv[2]);
    if (nblk <= 0 || nblk % 4 != 0) {
        fprintf(stderr, "NBLK must be a positive multiple of 4 (rows of head dim 256), got %s\n", argv[2]);
        return 2;
    }
    size_t bsize;
    const std::string t = argv[1];
    if (t == "turbo4_0") bsize = sizeof(block_turbo4_0);
    else if (t == "turbo3_0") bsize = sizeof(block_turbo3_0);
    else if (t == "turbo2_0") bsize = sizeof(block_turbo2_0);
    else { fprintf(stderr, "unknown type %s\n", argv[1]); return 2; }
    FILE * in = fopen(argv[3], "rb");
    if (!in) { perror(argv[3]); return 2; }
    std::vector<uint8_t> blocks(bsize*nblk);
    std::vector<int8_t> q(QK_TURBO*nblk);
    std::vector<float> qd(2*nblk);
    if (fread(blocks.data(), 1, blocks.size(), in) != blocks.size() || fread(q.data(), 1, q.size(), in) != q.size() ||
        fread(qd.data(), 4, qd.size(), in) != qd.size()) {
        fprintf(stderr, "%s: short input\n", argv[3]);
        return 2;
    }
    fclose(in);
    FILE * out = fopen(argv[4], "wb");
    if (!out) { perror(argv[4]); return 2; }
    if (t == "turbo4_0") run<GGML_TYPE_TURBO4_0>(nblk, blocks.data(), q.data(), qd.data(), out);
    if (t == "turbo3_0") run<GGML_TYPE_TURBO3_0>(nblk, blocks.data(), q.data(), qd.data(), out);
    if (t == "turbo2_0") run<GGML_TYPE_TURBO2_0>(nblk, blocks.data(), q.data(), qd.data(), out);
    return fclose(out) == 0 ? 0 : 1;
}
