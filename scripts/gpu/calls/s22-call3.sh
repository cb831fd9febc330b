# session 22 call 3 (warm): serving, llama-batched-bench S_TG: equal KV memory (f16 with 64 sequences of 4096 + 128
# against turbo4 with 240) and equal batch (128 x 2048 + 128), turbo4 with DEC $1 (default 11)
. scripts/gpu/calls/common.sh; call_start 3
ensure_build; ensure_m8b
X=${1:-11}
RUNS="f16/f16:64:4096 turbo4/turbo4:240:4096:$X f16/f16:128:2048 turbo4/turbo4:128:2048:$X" timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf
echo "done at $(( $(date +%s) - T0 )) s"
