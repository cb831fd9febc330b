// tqgguf: the K/V type pairs that have a CUDA flash-attention vector kernel for turbo caches.
// The one list: turbo.cmake reads it to generate the instances, turbo-fattn.cuh declares them
// and adds them to fattn.cu's vector-case table, ggml-cuda.cu reports it as the backend
// feature TURBO_FA (shown by tqgguf info).
#pragma once

#define GGML_CUDA_TURBO_FA_PAIRS(X)                                                        \
    X(TURBO4_0, TURBO4_0) X(TURBO4_0, TURBO3_0) X(TURBO4_0, TURBO2_0)                        \
    X(TURBO3_0, TURBO4_0) X(TURBO3_0, TURBO3_0) X(TURBO3_0, TURBO2_0)                        \
    X(TURBO2_0, TURBO4_0) X(TURBO2_0, TURBO3_0) X(TURBO2_0, TURBO2_0)                        \
    X(F16,  TURBO4_0) X(F16,  TURBO3_0) X(F16,  TURBO2_0)                                    \
    X(BF16, TURBO4_0) X(BF16, TURBO3_0) X(BF16, TURBO2_0)                                    \
    X(Q8_0, TURBO4_0) X(Q8_0, TURBO3_0) X(Q8_0, TURBO2_0)                                    \
    X(Q4_0, TURBO4_0) X(Q4_0, TURBO3_0) X(Q4_0, TURBO2_0)                                    \
    X(TURBO4_0, F16)  X(TURBO3_0, F16)  X(TURBO2_0, F16)                                     \
    X(TURBO4_0, BF16) X(TURBO3_0, BF16) X(TURBO2_0, BF16)                                    \
    X(TURBO4_0, Q8_0) X(TURBO3_0, Q8_0) X(TURBO2_0, Q8_0)                                    \
    X(TURBO4_0, Q4_0) X(TURBO3_0, Q4_0) X(TURBO2_0, Q4_0)


#define GGML_CUDA_TURBO_FA_STR(K, V) #K "/" #V " "
#define GGML_CUDA_TURBO_FA_PAIRS_STR GGML_CUDA_TURBO_FA_PAIRS(GGML_CUDA_TURBO_FA_STR)
