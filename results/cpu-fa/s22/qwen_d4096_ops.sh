#!/usr/bin/env bash
# Qwen2.5-Coder-0.5B at d4096 (K centering full = auto for a quantized K): the prefill add-back in one op
# (LLAMA_K_CENTER_ADD_OP, default 1) against six nodes (=0) and the rotations in one node against three
# (LLAMA_TQ_ROT_ONE_NODE=0), beside f16/f16 and the other pairs, in one process: pp2048 and tg32, 3 interleaved
# rounds, 2 threads (scripts/tools/interleaved_bench.py, installed engine); to qwen-d4096-ops.jsonl / .md
set -u
cd "$(dirname "$0")"
R=$(cd ../../.. && pwd)
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(grep -o -m1 'avx512f' /proc/cpuinfo)" >> qwen-d4096-ops.md
python3 "$R/scripts/tools/interleaved_bench.py" qwen2.5-coder-0.5b --case f16/f16 --case turbo4/turbo4:full \
    --case turbo4/turbo4:full:LLAMA_K_CENTER_ADD_OP=0 --case turbo4/turbo4:full:LLAMA_TQ_ROT_ONE_NODE=0 \
    --case turbo3/turbo3:full --case q8_0/turbo4:full \
    --depth ${DEPTH:-4096} --prompt 2048 --tokens 32 --rounds ${ROUNDS:-3} -t 2 --out qwen-d4096-ops.jsonl >> qwen-d4096-ops.md 2>&1
echo "# done $(date -u +%T)" >> qwen-d4096-ops.md
