#!/usr/bin/env bash
# decode only at d0: 3 processes x 3 interleaved rounds, five pairs, tg64
cd /work/main
O=${O:-results/cpu-fa/s26}  # session 27 ran it again with O=results/cpu-fa/s27
for i in ${PROCS:-1 2 3}; do
  for m in smollm2-135m qwen2.5-coder-0.5b; do
    kc=; [ "${m#qwen}" != "$m" ] && kc=:full
    python3 scripts/tools/interleaved_bench.py "$m" --case f16/f16 --case turbo4/turbo4$kc --case f16/turbo4 \
        --case turbo3/turbo3$kc --case q8_0/turbo4$kc --depth 0 --prompt 0 --tokens 64 --rounds 3 -t 2 \
        --out "$O/tg-d0.jsonl" 2>/dev/null | grep -E '^\||@' | sed "s/^/p$i $m d0 /" >> "$O/tg-d0.md"
  done
done
echo "# done $(date -u +%T)" >> "$O/tg-d0.md"
