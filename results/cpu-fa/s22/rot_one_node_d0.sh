#!/usr/bin/env bash
# Q, K and V rotated in one CPU node (LLAMA_TQ_ROT_ONE_NODE, default 1) against upstream's three (=0), in one
# process with f16/f16: SmolLM2-135M tg128 @ d0, 8 interleaved rounds, 2 threads (scripts/tools/interleaved_bench.py,
# installed engine); appends to rot-one-node-d0.jsonl, the table to rot-one-node-d0.md
set -u
cd "$(dirname "$0")"
R=$(cd ../../.. && pwd)
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(grep -o -m1 'avx512f' /proc/cpuinfo)" >> rot-one-node-d0.md
python3 "$R/scripts/tools/interleaved_bench.py" ${MODEL:-smollm2-135m} --case f16/f16 --case turbo4/turbo4 \
    --case turbo4/turbo4:off:LLAMA_TQ_ROT_ONE_NODE=0 --case f16/turbo4 --case q8_0/turbo4 --case turbo4/turbo4:off:norot \
    --depth 0 --tokens 128 --rounds ${ROUNDS:-8} -t 2 --out rot-one-node-d0.jsonl >> rot-one-node-d0.md 2>&1
echo "# done $(date -u +%T)" >> rot-one-node-d0.md
