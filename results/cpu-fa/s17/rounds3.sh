#!/usr/bin/env bash
# interleaved llama-bench rounds, Qwen2.5-Coder-0.5B (14 Q / 2 KV heads, hd 64) tg32 @ d4096, 2 threads; engines before / fused
M=~/.cache/tqgguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
echo "# $(date -u +%FT%TZ) $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for r in 1 2 3; do
  for cfg in "f16 f16 before" "f16 turbo4 before" "f16 turbo4 fused"; do set -- $cfg
    echo "## round $r $1/$2 $3 $(date -u +%T)"
    LD_LIBRARY_PATH=/tmp/bins/$3 /tmp/bins/$3/llama-bench -m $M -t 2 -fa 1 -ctk $1 -ctv $2 -p 0 -n 32 -d 4096 -r 1 -o md 2>/dev/null | grep -E "tg32"
  done
done
echo "# done $(date -u +%T)"
