#!/bin/bash
# The first issue-14 numbers (PPL only, no KLD): tqgguf ppl, WikiText-2 test, n_ctx 512,
# 20 chunks, one run after another, each writing its JSON to results/kv-plan/; and Gemma-3's
# KV MiB at n_ctx 32768. run_eval.sh has the full set with KLD, run_mix.sh the mix plans.
#   PATH=/path/to/venv/bin:$PATH TH=2 bash results/kv-plan/run_ppl.sh
set -u
. "$(dirname "$0")/lib.sh"
ppl_json qwen-turbo4-auto      qwen2.5-coder-0.5b --ctk turbo4 --ctv turbo4                    # no --k-center flag
ppl_json smollm2-turbo3-b2     smollm2-135m --ctk turbo3 --ctv turbo3 --kv-boundary 2
[ -s $D/gemma3-kv-mib-32768.txt ] || gemma_kv_mib > $D/gemma3-kv-mib-32768.txt
echo ALL DONE
