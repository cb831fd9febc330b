#!/usr/bin/env bash
# Issue 27's table on the installed engine: pp2048 and tg16 with -r REPS on 2 threads at each
# depth, every K/V pair beside f16/f16 in one results directory (tqgguf bench resumes from its
# results.jsonl, so a stopped run picks up where it was). Depths outermost, so every pair has
# its shallow rows before the long fills start. K centering: tqgguf's default (auto: full for a
# model with a K bias and a quantized K, e.g. Qwen2.5; off for SmolLM2).
#
#   scripts/maintain/cpu27_table.sh MODEL DIR "DEPTH ..." ["PAIR ..."] [REPS]
#   scripts/maintain/cpu27_table.sh smollm2-135m results/cpu-fa/s13/smollm2 "0 4096"
# CPU27_P: the prompt length (default 2048; 0: decode rows only). CPU27_ARGS: more tqgguf bench flags, e.g. --beyond-n-ctx-train for SmolLM2 at d16384 (its
# n_ctx_train is 8192: bench refuses depth + tokens beyond it unless told it is speed only).
set -euo pipefail
model=$1 dir=$2 depths=$3
pairs=${4:-f16/f16 turbo4/turbo4 f16/turbo4 turbo3/turbo3 q8_0/turbo4}
reps=${5:-3}
for d in $depths; do
    for pair in $pairs; do
        echo "== $pair d$d (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        tqgguf bench "$model" --ctk "${pair%/*}" --ctv "${pair#*/}" -p "${CPU27_P:-2048}" -n 16 -d "$d" -r "$reps" -t 2 \
            --dir "$dir" --no-plot -o md ${CPU27_ARGS:-}
    done
done
