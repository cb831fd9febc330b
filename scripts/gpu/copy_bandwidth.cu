// tqgguf: the card's device-to-device copy bandwidth, measured beside the flash-attention
// micro-benchmark (scripts/gpu/cuda.sh fa) so that kernel GB/s have a yardstick from the
// same run. 2 GiB copied 20 times with cudaMemcpyAsync, timed with CUDA events; a copy reads
// and writes every byte, so the figure printed is (read + written bytes) / time, and the
// read-only rate a kernel can reach is about the same number (HBM serves either direction).
//   nvcc -O2 -o copy-bandwidth scripts/gpu/copy_bandwidth.cu && ./copy-bandwidth
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main() {
    const size_t bytes = size_t(2) << 30;
    const int reps = 20;
    void *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemset(a, 1, bytes));
    CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));  // warm-up
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0));
    for (int i = 0; i < reps; ++i) {
        CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    }
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    const double s = ms / 1e3 / reps;
    printf("copy bandwidth: %.1f GB/s (read + write of %zu MiB per copy, %d copies, %.3f ms each)\n",
           2.0 * bytes / s / 1e9, bytes >> 20, reps, s * 1e3);
    return 0;
}
