#!/bin/bash
# Issue 14's Must-show numbers (WikiText-2 test, n_ctx 512, 20 chunks unless said; PPL + KLD
# against each model's f16/f16 baseline, computed once per sweep dir and cached), one run
# after another, most needed first:
#   PATH=/path/to/venv/bin:$PATH bash results/kv-plan/run_eval.sh
# Uniform turbo3/turbo4 rows of the tables are reused from the sweeps' maps where they exist
# (results/sweep-smollm2, results/grid/gemma3-270m, results/k-center/device/qwen_full.tsv).
set -u
. "$(dirname "$0")/lib.sh"
M=$D/mix
# 1. --kv-boundary 2 (uniform turbo3/turbo4 from the maps)
sweep_into smollm2 smollm2-135m --ctk turbo3 --ctv turbo3 --kv-boundary 2
sweep_into gemma3 gemma3-270m --ctk turbo3 --ctv turbo3 --kv-boundary 2
# 2. Gemma-3: sliding-window layers at f16, c=512
sweep_into gemma3 gemma3-270m --ctk turbo3 --ctv turbo3 --kv-swa f16
# 3. mix plans, evaluated as they appear
wait_for $M/smollm2-3.5.json $M/smollm2-4.25.json
sweep_into smollm2 smollm2-135m --ctk f16 --ctv f16 --kv-plan $M/smollm2-3.5.json --kv-plan $M/smollm2-4.25.json
# 2. Gemma-3 at n_ctx 4096 (2 chunks: 2 x 2048 scored tokens)
sweep_into gemma3-c4096 gemma3-270m --ctk turbo3 --ctv turbo3 --kv-swa none,f16 -c 4096 --chunks 2
# 1. Qwen2.5-Coder-0.5B with --k-center full
sweep_into qwen qwen2.5-coder-0.5b --k-center full --ctk turbo3 --ctv turbo3 --kv-boundary 2
wait_for $M/gemma3-3.5.json $M/gemma3-4.25.json
sweep_into gemma3 gemma3-270m --ctk f16 --ctv f16 --kv-plan $M/gemma3-3.5.json --kv-plan $M/gemma3-4.25.json
sweep_into gemma3 gemma3-270m --ctk turbo4 --ctv turbo4 --kv-swa f16
wait_for $M/qwen-3.5.json $M/qwen-4.25.json
sweep_into qwen qwen2.5-coder-0.5b --k-center full --ctk f16 --ctv f16 --kv-plan $M/qwen-3.5.json --kv-plan $M/qwen-4.25.json
# the uniform rows on this machine too (the tables reuse the maps' rows)
sweep_into gemma3 gemma3-270m --ctk turbo3,turbo4 --ctv turbo3,turbo4
echo "[$(date -u +%T)] EVAL DONE"
