#!/bin/bash
# Issue 14's Must-show numbers (WikiText-2 test, n_ctx 512, 20 chunks unless said; PPL + KLD
# against each model's f16/f16 baseline, computed once per model/n_ctx/chunks and cached),
# one run after another, most needed first:
#   PATH=/path/to/venv/bin:$PATH bash results/kv-plan/run_eval.sh
# Uniform turbo3/turbo4 rows of the tables are reused from the sweeps' maps where they exist
# (results/grid/*_llama-perplexity_grid.tsv, results/k-center/device/qwen_full.tsv).
# The mix plans come from run_mix.sh (waited for).
set -u
. "$(dirname "$0")/lib.sh"
M=$D/mix
# 1. --kv-boundary 2 (uniform turbo3/turbo4 from the maps)
sweep_into smollm2 smollm2-135m --ctk turbo3 --ctv turbo3 --kv-boundary 2
sweep_into gemma3 gemma3-270m --ctk turbo3 --ctv turbo3 --kv-boundary 2
sweep_into qwen qwen2.5-coder-0.5b --k-center full --ctk turbo3 --ctv turbo3 --kv-boundary 2
# 2. Gemma-3: sliding-window layers at f16, c=512 and c=4096 (1 chunk: 2048 scored tokens)
sweep_into gemma3 gemma3-270m --ctk turbo3 --ctv turbo3 --kv-swa f16
sweep_into gemma3-c4096 gemma3-270m --ctk turbo3 --ctv turbo3 --kv-swa none,f16 -c 4096 --chunks 1
# 3. mix plans
wait_for $M/smollm2-3.5.json $M/smollm2-4.25.json
sweep_into smollm2 smollm2-135m --ctk f16 --ctv f16 --kv-plan $M/smollm2-3.5.json --kv-plan $M/smollm2-4.25.json
wait_for $M/gemma3-3.5.json $M/gemma3-4.25.json
sweep_into gemma3 gemma3-270m --ctk f16 --ctv f16 --kv-plan $M/gemma3-3.5.json --kv-plan $M/gemma3-4.25.json
wait_for $M/qwen-3.5.json $M/qwen-4.25.json
sweep_into qwen qwen2.5-coder-0.5b --k-center full --ctk f16 --ctv f16 --kv-plan $M/qwen-3.5.json --kv-plan $M/qwen-4.25.json
# more points: turbo4 on Gemma's global layers, and the uniform rows on this machine
sweep_into gemma3 gemma3-270m --ctk turbo4 --ctv turbo4 --kv-swa f16
sweep_into gemma3-c4096 gemma3-270m --ctk turbo4 --ctv turbo4 --kv-swa none,f16 -c 4096 --chunks 1
sweep_into gemma3 gemma3-270m --ctk turbo3,turbo4 --ctv turbo3,turbo4
echo "[$(date -u +%T)] EVAL DONE"
