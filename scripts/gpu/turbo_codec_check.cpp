// tqgguf: the CUDA turbo codec against the CPU codec, on the GPU machine.
//
//   turbo_codec_check [n_blocks ...]  (default 1048576 1000 64 7)
//
// For turbo4/turbo3/turbo2: n_blocks Gaussian blocks of 64 values (row scales log-normal,
// every 97th block with one large outlier, plus zero, constant, tiny and huge blocks) are
// written into a turbo tensor by SET_ROWS on CUDA0 (the KV-cache write) and by the CPU
// encoder (ggml_quantize_chunk, the same scale-search encoder the CPU SET_ROWS uses).
// Prints: bytes that differ, round-trip relative MSE (sum of squared error / sum of squares)
// of each, whether GET_ROWS on CUDA0 decodes the CPU's bytes to the CPU's floats bit for bit,
// and the CUDA SET_ROWS time. Exit status 1 if any byte or decoded float differs.
//
// Build (scripts/gpu/cuda.sh does it): g++ -O2 -std=c++17 turbo_codec_check.cpp
//   -I<tree>/ggml/include -L<build>/bin -lggml -lggml-base -lggml-cuda

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-cuda.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

static std::vector<float> make_rows(int64_t n_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(n_blocks * 64);
    for (int64_t b = 0; b < n_blocks; ++b) {
        float * p = x.data() + b * 64;
        const float scale = std::exp(2.0f * g(rng));
        for (int j = 0; j < 64; ++j) {
            p[j] = scale * g(rng);
        }
        if (b % 97 == 3) {
            p[b % 64] *= 40.0f;  // one outlier
        }
    }
    // edge blocks at the front: zeros, a constant, tiny values, values beyond fp16
    const float edge[6] = { 0.0f, 1.0f, 1e-8f, 6.1e-5f, 7e4f, 1e18f };
    for (int e = 0; e < 6 && e < n_blocks; ++e) {
        for (int j = 0; j < 64; ++j) {
            x[e * 64 + j] = (j % 2 ? -1.0f : 1.0f) * edge[e] * (e == 1 ? 1.0f : (1.0f + j / 64.0f));
        }
    }
    return x;
}

static int check_type(ggml_backend_t cuda, ggml_type type, int64_t n_blocks) {
    const std::vector<float> x = make_rows(n_blocks, 1234u + (uint32_t) type);
    const size_t row_size = ggml_row_size(type, 64);

    // CPU encoder
    std::vector<uint8_t> cpu_q(row_size * n_blocks);
    ggml_quantize_chunk(type, x.data(), cpu_q.data(), 0, n_blocks, 64, nullptr);

    // CUDA: SET_ROWS (cache write) of every row, and GET_ROWS of the CPU's bytes
    ggml_init_params ip = { 16 * ggml_tensor_overhead() + 2 * ggml_graph_overhead() + 4096, nullptr, true };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * src  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, n_blocks);
    ggml_tensor * idx  = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, n_blocks);
    ggml_tensor * dst  = ggml_new_tensor_2d(ctx, type, 64, n_blocks);
    ggml_tensor * qin  = ggml_new_tensor_2d(ctx, type, 64, n_blocks);
    ggml_tensor * idx32 = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_blocks);
    ggml_tensor * set  = ggml_set_rows(ctx, dst, src, idx);
    ggml_tensor * get  = ggml_get_rows(ctx, qin, idx32);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cuda);

    std::vector<int64_t> iv(n_blocks);
    std::vector<int32_t> iv32(n_blocks);
    for (int64_t i = 0; i < n_blocks; ++i) { iv[i] = i; iv32[i] = (int32_t) i; }
    ggml_backend_tensor_set(src, x.data(), 0, ggml_nbytes(src));
    ggml_backend_tensor_set(idx, iv.data(), 0, ggml_nbytes(idx));
    ggml_backend_tensor_set(idx32, iv32.data(), 0, ggml_nbytes(idx32));
    ggml_backend_tensor_set(qin, cpu_q.data(), 0, ggml_nbytes(qin));

    ggml_cgraph * gset = ggml_new_graph(ctx);
    ggml_build_forward_expand(gset, set);
    if (ggml_backend_graph_compute(cuda, gset) != GGML_STATUS_SUCCESS) { fprintf(stderr, "set_rows failed\n"); return 1; }
    ggml_backend_synchronize(cuda);
    const int reps = 5;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
        ggml_backend_graph_compute(cuda, gset);
    }
    ggml_backend_synchronize(cuda);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;

    ggml_cgraph * gget = ggml_new_graph(ctx);
    ggml_build_forward_expand(gget, get);
    if (ggml_backend_graph_compute(cuda, gget) != GGML_STATUS_SUCCESS) { fprintf(stderr, "get_rows failed\n"); return 1; }

    std::vector<uint8_t> gpu_q(row_size * n_blocks);
    ggml_backend_tensor_get(dst, gpu_q.data(), 0, gpu_q.size());
    std::vector<float> gpu_dec(n_blocks * 64);
    ggml_backend_tensor_get(get, gpu_dec.data(), 0, gpu_dec.size() * sizeof(float));

    // compare
    int64_t diff_bytes = 0, diff_blocks = 0;
    for (int64_t b = 0; b < n_blocks; ++b) {
        int64_t d = 0;
        for (size_t k = 0; k < row_size; ++k) {
            d += cpu_q[b * row_size + k] != gpu_q[b * row_size + k];
        }
        diff_bytes += d;
        diff_blocks += d != 0;
        if (d != 0 && diff_blocks <= 3) {
            fprintf(stderr, "  %s block %lld differs (%lld bytes)\n", ggml_type_name(type), (long long) b, (long long) d);
        }
    }
    const auto * tt = ggml_get_type_traits(type);
    std::vector<float> cpu_dec(n_blocks * 64), gpu_q_dec(n_blocks * 64);
    tt->to_float(cpu_q.data(), cpu_dec.data(), n_blocks * 64);
    tt->to_float(gpu_q.data(), gpu_q_dec.data(), n_blocks * 64);
    int64_t diff_dec = 0;
    for (int64_t i = 0; i < n_blocks * 64; ++i) {
        diff_dec += std::memcmp(&cpu_dec[i], &gpu_dec[i], sizeof(float)) != 0;
    }
    // relative MSE over the Gaussian blocks (skip the 6 edge blocks)
    double err_cpu = 0, err_gpu = 0, sig = 0;
    for (int64_t i = 6 * 64; i < n_blocks * 64; ++i) {
        const double xi = x[i];
        sig     += xi * xi;
        err_cpu += (cpu_dec[i] - xi) * (cpu_dec[i] - xi);
        err_gpu += (gpu_q_dec[i] - xi) * (gpu_q_dec[i] - xi);
    }
    printf("%-8s blocks %lld | SET_ROWS bytes differing from CPU: %lld (%lld blocks) | rel MSE CPU %.5f CUDA %.5f | "
           "GET_ROWS floats differing: %lld | CUDA SET_ROWS %.3f ms (%.1f Mblocks/s)\n",
           ggml_type_name(type), (long long) n_blocks, (long long) diff_bytes, (long long) diff_blocks,
           err_cpu / sig, err_gpu / sig, (long long) diff_dec, ms, n_blocks / ms / 1e3);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return diff_bytes != 0 || diff_dec != 0;
}

int main(int argc, char ** argv) {
    // sizes: a large write (one warp per block on CUDA) and small ones (a CTA per block: the
    // decoding path of set-rows; ggml-cuda/turbo.cuh switches at 8 blocks per multiprocessor)
    std::vector<int64_t> sizes;
    for (int i = 1; i < argc; ++i) { sizes.push_back(std::atoll(argv[i])); }
    if (sizes.empty()) { sizes = { 1048576, 1000, 64, 7 }; }
    ggml_backend_t cuda = ggml_backend_cuda_init(0);
    if (!cuda) {
        fprintf(stderr, "no CUDA device\n");
        return 2;
    }
    int bad = 0;
    for (const int64_t n_blocks : sizes) {
        for (const char * name : { "turbo4", "turbo3", "turbo2" }) {
            ggml_type type = GGML_TYPE_COUNT;
            for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
                const char * tn = ggml_type_name((ggml_type) t);
                if (tn && std::strcmp(tn, name) == 0) { type = (ggml_type) t; }
            }
            if (type == GGML_TYPE_COUNT) { fprintf(stderr, "type %s not in this ggml\n", name); return 2; }
            bad |= check_type(cuda, type, n_blocks);
        }
    }
    ggml_backend_free(cuda);
    printf(bad ? "MISMATCH\n" : "CUDA codec == CPU codec (bytes and floats)\n");
    return bad;
}
