# session 27 call 1b (cold, with ~600 device seconds left): s27-call1.sh cut to its core, the d0 decode token's launch
# overlap: build, the 8B shape, then tg64 @ d0 in interleaved rounds (-r 2 each) of f16, turbo4, turbo4 with the
# Hadamard kernel's early launch trigger (GGML_CUDA_FWHT_LC=1), turbo4 without the rotation; CALL_LIMIT=N plans the
# rounds for N seconds.
. scripts/gpu/calls/common.sh; call_start 1
cold_start
RUNS="f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_FWHT_LC=1 turbo4/turbo4:LLAMA_ATTN_ROT_DISABLE=1"
tg_env_rounds bench-m8b-d0.txt 4 0 2 15 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
