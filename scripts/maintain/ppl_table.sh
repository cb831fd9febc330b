#!/usr/bin/env bash
# The foundation issue's PPL table for one model (WikiText-2 test, c=512, 20 chunks, CPU):
# f16/f16, q8_0/q8_0, q4_0/q4_0, q8_0/turbo4, q8_0/turbo3, turbo4/turbo4, turbo3/turbo3 with
# rotation on, plus turbo4/turbo4 and q4_0/q4_0 with rotation off. Runs as sweeps into one
# output dir, so the f16 baseline is computed once, KLD comes along, and a rerun resumes.
#   scripts/maintain/ppl_table.sh MODEL [OUT_DIR] [CHUNKS]
set -euo pipefail
model=${1:?model name or path}
out=${2:-results/ppl-$model}
chunks=${3:-20}
text=${TQGGUF_TEXT:-$(dirname "$0")/../../../shared/data/wiki.test.raw}
common=(-f "$text" -c 512 --chunks "$chunks" -o "$out")
tqgguf sweep "$model" "${common[@]}" --ctk q8_0 --ctv q8_0,turbo4,turbo3 --rot on
tqgguf sweep "$model" "${common[@]}" --ctk turbo4 --ctv turbo4 --rot on,off
tqgguf sweep "$model" "${common[@]}" --ctk q4_0 --ctv q4_0 --rot on,off
tqgguf sweep "$model" "${common[@]}" --ctk turbo3 --ctv turbo3 --rot on
