# session 29 call 4 (cold, ~450 device seconds left; an H100 this session): serving the 8B shape at equal KV memory
# with the new default decode (variant 14): llama-batched-bench S_TG, f16 with 64 sequences of 4096 + 128 against
# turbo4 with 240, then at an equal batch (128 x (2048 + 128)) as time allows. CALL_LIMIT=N plans for N s.
. scripts/gpu/calls/common.sh; call_start 4
cold_start
for run in f16/f16:64:4096 turbo4/turbo4:240:4096 f16/f16:128:2048 turbo4/turbo4:128:2048; do
  [ $(left) -lt 100 ] && { echo "stopping before $run: $(left) s left"; break; }
  RUNS=$run timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf | grep -v '^columns'
done
echo "done at $(( $(date +%s) - T0 )) s"
