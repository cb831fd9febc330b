#!/usr/bin/env bash
# Issue 27's table (prefill pp2048 and decode tg32 at depths 0, 4096, 16384; SmolLM2-135M and Qwen2.5-Coder-0.5B with
# K centering auto = full for a quantized K), every pair against f16/f16 in the same process, interleaved rounds
# (scripts/tools/interleaved_bench.py; this VM's speed drifts between processes). Installed engine (tqgguf build).
#   bash results/cpu-fa/s21/issue_table.sh          # appends to issue-table.jsonl, the tables to issue-table.md
set -u
cd "$(dirname "$0")"
R=$(cd ../../.. && pwd)
J=issue-table.jsonl; M=issue-table.md
S="--case f16/f16 --case turbo4/turbo4 --case f16/turbo4 --case turbo3/turbo3 --case q8_0/turbo4"
Q="--case f16/f16 --case turbo4/turbo4:full --case f16/turbo4 --case turbo3/turbo3:full --case q8_0/turbo4:full"
Q3="--case f16/f16 --case turbo4/turbo4:full --case f16/turbo4"
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(grep -o -m1 'avx512f' /proc/cpuinfo)" >> $M
for run in ${RUNS:-"smollm2-135m 0 $S" "qwen2.5-coder-0.5b 0 $Q" "qwen2.5-coder-0.5b 4096 $Q" "smollm2-135m 4096 $S" \
                   "qwen2.5-coder-0.5b 16384 $Q3" "smollm2-135m 16384 $S"}; do
  set -- $run
  m=$1; d=$2; shift 2
  echo "## $m d$d $(date -u +%T)" >> $M
  python3 "$R/scripts/tools/interleaved_bench.py" $m "$@" --depth $d --prompt 2048 --tokens 32 --rounds ${ROUNDS:-3} \
      -t 2 --out $J >> $M 2>&1
done
echo "# done $(date -u +%T)" >> $M
