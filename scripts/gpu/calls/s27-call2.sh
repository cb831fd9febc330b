# session 27 call 2 (warm, after call 1): the tg64 marks of the 8B shape in three interleaved rounds (-r 1
# each) at d0 / 16K / 64K: f16, q8_0, turbo4, turbo4 with the Hadamard kernel's early launch trigger
# (GGML_CUDA_FWHT_LC=1), turbo3; every figure beside f16 and q8_0 in the
# same run (scripts/gpu/tg_rounds.py). Then, time left, serving at equal KV memory (llama-batched-bench S_TG: f16 with
# 64 sequences of 4096 + 128, turbo4 with 240).
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
RUNS="f16/f16: q8_0/q8_0: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_FWHT_LC=1 turbo3/turbo3:"
tg_env_rounds bench-m8b-rounds.txt 3 0,16384,65536 1 60 "$RUNS"
for run in f16/f16:64:4096 turbo4/turbo4:240:4096; do
  [ $(left) -lt 130 ] && { echo "stopping before $run: $(left) s left"; break; }
  RUNS=$run timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf | grep -v '^columns'
done
echo "done at $(( $(date +%s) - T0 )) s"
