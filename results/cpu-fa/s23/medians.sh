#!/usr/bin/env bash
# Issue 27's table as medians over processes (session 22 found one process's ratios ±15-25 % from the next):
# for each model and depth, N processes (default 3) of interleaved_bench with the five pairs, pp2048 and tg32,
# ROUNDS interleaved rounds each (default 2), core_probe before each process. K centering as tqgguf's auto:
# off for SmolLM2, full for Qwen2.5's quantized-K pairs. JSON lines to medians.jsonl, the tables to medians.md;
# `python3 medians_report.py` makes the medians.
#   bash medians.sh "smollm2-135m:0 smollm2-135m:4096 qwen2.5-coder-0.5b:4096"
# OUT=DIR (relative to this folder; default here) writes medians.md / medians.jsonl there instead.
set -u
cd "$(dirname "$0")"
O=${OUT:-.}; mkdir -p "$O"
R=$(cd ../../.. && pwd)
P=${TMPDIR:-/tmp}/core_probe; cc -O2 -pthread core_probe.c -o "$P"
echo "# $(date -u +%FT%TZ) $(nproc) cores" >> "$O/medians.md"
for i in $(seq ${N:-3}); do
  for md in $1; do
    m=${md%:*} d=${md#*:}
    kc=; [ "${m#qwen}" != "$m" ] && kc=:full
    echo "p$i $m d$d before: $("$P")" >> "$O/medians.md"
    python3 "$R/scripts/tools/interleaved_bench.py" "$m" --case f16/f16 --case turbo4/turbo4$kc --case f16/turbo4 \
        --case turbo3/turbo3$kc --case q8_0/turbo4$kc --depth "$d" --prompt 2048 --tokens 32 --rounds "${ROUNDS:-2}" -t 2 \
        --out "$O/medians.jsonl" 2>/dev/null | grep -E '^\||@' | sed "s/^/p$i $m d$d /" >> "$O/medians.md"
  done
done
echo "# done $(date -u +%T)" >> "$O/medians.md"
