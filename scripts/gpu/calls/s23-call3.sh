# session 23 call 3 (warm): serving, llama-batched-bench S_TG at equal KV memory: f16 with 64 sequences of 4096 + 128
# against turbo4 with 240, DEC $1 and $2 (default 12 and 11), then DEC $3 (default 13) if time is left
. scripts/gpu/calls/common.sh; call_start 3
ensure_build; ensure_m8b
A=${1:-12} Bv=${2:-11} C=${3:-13}
for run in f16/f16:64:4096 turbo4/turbo4:240:4096:$A turbo4/turbo4:240:4096:$Bv turbo4/turbo4:240:4096:$C; do
  [ $(left) -lt 130 ] && { echo "stopping before $run: $(left) s left"; break; }
  RUNS=$run timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf | grep -v '^columns'
done
echo "done at $(( $(date +%s) - T0 )) s"
