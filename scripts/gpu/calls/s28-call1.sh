# session 28 call 1 (cold, ~650 device seconds left): the d0 token's flash attention. At d0 (a 256-cell cache) the
# tensor-core decode (variant 12) took 6.14 us a call against f16's vector kernel's 4.79 (session 28's d0 token under
# Nsight Compute): whether the vector decode kernels are faster on short caches. FA alone (hd 128, 8 K/V heads,
# GQA 4, one query) at 256 / 512 / 1024 / 2048 cells, turbo4 with GGML_CUDA_TURBO_FA_DEC = 12 (the default), 1 (the
# vector kernel) and 0 (the old vector kernel), f16 in the first round, three interleaved rounds; then tg64 @ d0 of
# the 8B shape in interleaved rounds (-r 2) of f16, turbo4 and turbo4 with DEC 1 and 0. CALL_LIMIT=N plans for N s.
. scripts/gpu/calls/common.sh; call_start 1
cold_start
short_cache_ab fa-short "256|512|1024|2048" "12 1 0" bench-m8b-d0-dec.txt 25 \
  "f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=1 turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=0"
