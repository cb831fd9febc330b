#!/bin/bash
# Issue 14, `tqgguf mix` at 3.5 and 4.25 bits/value on the three models: one sensitivity
# measurement per model (default calibration: the built-in pydoc corpus, -c 256 --chunks 2;
# not the WikiText-2 evaluation text), both budgets chosen from it. One model at a time.
#   PATH=/path/to/venv/bin:$PATH bash results/kv-plan/run_mix.sh
# The plans are evaluated on WikiText-2 by results/kv-plan/run_eval.sh.
set -u
. "$(dirname "$0")/lib.sh"
mix_plans smollm2 smollm2-135m
mix_plans gemma3 gemma3-270m
mix_plans qwen qwen2.5-coder-0.5b
echo "[$(date -u +%T)] MIX DONE"
