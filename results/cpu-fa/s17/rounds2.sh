#!/usr/bin/env bash
# interleaved llama-bench rounds, SmolLM2 tg32 @ d8192, 2 threads; engines: before (session-17 start), fused (F16 K once + fused V mad)
M=~/.cache/tqgguf/models/SmolLM2-135M-Instruct.Q4_1.gguf
echo "# $(date -u +%FT%TZ) $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for r in 1 2 3; do
  for cfg in "f16 f16 before" "f16 turbo4 before" "f16 turbo4 fused" "turbo4 turbo4 before" "turbo4 turbo4 fused"; do set -- $cfg
    echo "## round $r $1/$2 $3 $(date -u +%T)"
    LD_LIBRARY_PATH=/tmp/bins/$3 /tmp/bins/$3/llama-bench -m $M -t 2 -fa 1 -ctk $1 -ctv $2 -p 0 -n 32 -d 8192 -r 1 -o md 2>/dev/null | grep -E "tg32"
  done
done
echo "# done $(date -u +%T)"
