#!/usr/bin/env bash
# Issue 5 measurement: PPL/KLD before and after in-engine K centering (--k-center bias) on
# Qwen2.5-Coder-0.5B, WikiText-2 test, n_ctx 512, 20 chunks, rotation on. Each pair is one
# resumable `tqgguf sweep` into the same directory, so the rows build up one table.
#   scripts/maintain/k_center_sweep.sh [OUT_DIR] [CHUNKS] [MODEL] [K_CENTER_AXIS]
set -euo pipefail
out=${1:-results/k-center/qwen2.5-coder-0.5b}
chunks=${2:-20}
model=${3:-qwen2.5-coder-0.5b}
axis=${4:-off,bias}
mkdir -p "$out"
for pair in f16:f16 q4_0:q4_0 q8_0:q4_0 turbo4:turbo4 turbo3:turbo3 q8_0:turbo3 turbo4:q8_0; do
  k=${pair%%:*}; v=${pair##*:}
  tqgguf sweep "$model" -ctk "$k" -ctv "$v" --k-center "$axis" --chunks "$chunks" -o "$out" 2>&1 | tail -n 3
done
