// FLASH_ATTN_EXT prefill on ggml's CPU backend, K and V in the KV cache's layout (a cell's heads side by side),
// with the work buffer (cplan.work_data) placed OFF bytes past a 4 KiB boundary: what a 16-byte-aligned work
// buffer (new uint8_t[] before patch 0013) costs the tiled path against a cache-line-aligned one.
//
//   g++ -O2 -std=c++17 -I$SRC/ggml/include fa_align_bench.cpp -o fa_align_bench -L$BIN -lggml -lggml-base \
//       -lggml-cpu -Wl,-rpath,$BIN
//   WOFF=16 ./fa_align_bench K V HEAD_DIM N_KV_HEADS GQA N_KV N_QUERIES REPS THREADS
//
// K, V: f16 | q8_0 | turbo4 | turbo3 | f32. Random N(0,1) K/V (quantized by the type's from_float), Q N(0,0.09),
// a causal mask over the last N_QUERIES cells. Prints the median and minimum ms of REPS runs after one warm-up,
// and a checksum of the output (the same for every WOFF: the offset moves the scratch, not the arithmetic).
#include "ggml.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static ggml_type type_of(const char * s) {
    const std::string t(s);
    if (t == "f16")    return GGML_TYPE_F16;
    if (t == "f32")    return GGML_TYPE_F32;
    if (t == "q8_0")   return GGML_TYPE_Q8_0;
    if (t == "turbo4") return GGML_TYPE_TURBO4_0;
    if (t == "turbo3") return GGML_TYPE_TURBO3_0;
    fprintf(stderr, "unknown type %s (f16, f32, q8_0, turbo4, turbo3)\n", s);
    exit(2);
}

int main(int argc, char ** argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: [WOFF=bytes] %s K V HEAD_DIM N_KV_HEADS GQA N_KV N_QUERIES REPS THREADS\n", argv[0]);
        return 2;
    }
    const ggml_type tk = type_of(argv[1]), tv = type_of(argv[2]);
    const int hd = atoi(argv[3]), nkh = atoi(argv[4]), gqa = atoi(argv[5]), nkv = atoi(argv[6]), nq = atoi(argv[7]);
    const int reps = atoi(argv[8]), nth = atoi(argv[9]);
    const int off = getenv("WOFF") ? atoi(getenv("WOFF")) : 0;
    const int nqh = nkh*gqa;

    ggml_init_params ip = { (size_t) 3 << 30, nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * q  = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hd, nq, nqh);
    ggml_tensor * kc = ggml_new_tensor_2d(ctx, tk, hd*nkh, nkv);  // the cache: one row per cell
    ggml_tensor * vc = ggml_new_tensor_2d(ctx, tv, hd*nkh, nkv);
    ggml_tensor * m  = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, nkv, nq);

    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> buf((size_t) hd*nkh*nkv);
    auto fill = [&](ggml_tensor * t) {
        for (float & x : buf) x = nd(rng);
        if (t->type == GGML_TYPE_F32) {
            memcpy(t->data, buf.data(), buf.size()*sizeof(float));
        } else if (t->type == GGML_TYPE_F16) {
            ggml_fp32_to_fp16_row(buf.data(), (ggml_fp16_t *) t->data, buf.size());
        } else {
            ggml_get_type_traits_cpu(t->type)->from_float(buf.data(), t->data, buf.size());
        }
    };
    fill(kc);
    fill(vc);
    for (int64_t i = 0; i < (int64_t) hd*nq*nqh; i++) {
        ((float *) q->data)[i] = 0.3f*nd(rng);
    }
    ggml_fp16_t * md = (ggml_fp16_t *) m->data;
    for (int i = 0; i < nq; i++) {
        for (int j = 0; j < nkv; j++) {
            md[(size_t) i*nkv + j] = ggml_fp32_to_fp16(j <= nkv - nq + i ? 0.0f : -INFINITY);
        }
    }
    // one head's rows a cell apart, as llama.cpp's KV cache views them
    ggml_tensor * k = ggml_view_3d(ctx, kc, hd, nkv, nkh, kc->nb[1], ggml_row_size(tk, hd), 0);
    ggml_tensor * v = ggml_view_3d(ctx, vc, hd, nkv, nkh, vc->nb[1], ggml_row_size(tv, hd), 0);
    ggml_tensor * out = ggml_flash_attn_ext(ctx, q, k, v, m, 1.0f/sqrtf((float) hd), 0.0f, 0.0f);
    ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, out);

    ggml_cplan cp = ggml_graph_plan(g, nth, nullptr);
    uint8_t * wb = (uint8_t *) aligned_alloc(4096, ((cp.work_size + off + 4095)/4096)*4096);
    cp.work_data = wb + off;
    ggml_graph_compute(g, &cp);  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < reps; r++) {
        const auto t0 = std::chrono::steady_clock::now();
        ggml_graph_compute(g, &cp);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    double chk = 0;
    for (int i = 0; i < hd; i++) chk += ((float *) out->data)[i];
    printf("WOFF %2d %s/%s hd %d kv_heads %d gqa %d n_kv %d queries %d: median %.2f ms, min %.2f (checksum %.6f)\n",
           off, argv[1], argv[2], hd, nkh, gqa, nkv, nq, ms[ms.size()/2], ms[0], chk);
    free(wb);
    ggml_free(ctx);
    return 0;
}
