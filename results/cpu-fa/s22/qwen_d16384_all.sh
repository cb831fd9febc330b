#!/usr/bin/env bash
# Issue 27's table, Qwen2.5-Coder-0.5B at d16384, all five pairs against f16/f16 in one process (K centering
# full = auto for a quantized K), 3 interleaved rounds (scripts/tools/interleaved_bench.py), installed engine;
# appends to qwen-d16384-all.jsonl, the table to qwen-d16384-all.md
set -u
cd "$(dirname "$0")"
R=$(cd ../../.. && pwd)
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(grep -o -m1 'avx512f' /proc/cpuinfo)" >> qwen-d16384-all.md
python3 "$R/scripts/tools/interleaved_bench.py" qwen2.5-coder-0.5b --case f16/f16 --case turbo4/turbo4:full --case f16/turbo4 \
    --case turbo3/turbo3:full --case q8_0/turbo4:full \
    --depth 16384 --prompt 2048 --tokens 32 --rounds ${ROUNDS:-3} -t 2 --out qwen-d16384-all.jsonl >> qwen-d16384-all.md 2>&1
echo "# done $(date -u +%T)" >> qwen-d16384-all.md
