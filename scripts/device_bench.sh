#!/usr/bin/env bash
# On the GPU machine's CPU (what produced results/device/bench_t16.md, bench_t2.md,
# kld_*.log and ppl_q8_0.log): llama-perplexity q8_0 PPL, KLD of q8_0/turbo4 and
# turbo3/turbo3 against an f16 base, and llama-bench per K=V type at depth 2048.
#   scripts/device_bench.sh LLAMA_BUILD_BIN MODEL.gguf TEXT OUT_DIR
set -uo pipefail
B=$1; M=$2; W=$3; OUT=$4
"$B/llama-perplexity" -m "$M" -f "$W" -c 512 -b 512 --chunks 20 -ctk q8_0 -ctv q8_0 -fa on -t 16 > "$OUT/ppl_q8_0.log" 2>&1
"$B/llama-perplexity" -m "$M" -f "$W" -c 512 -b 512 --chunks 10 -fa on -t 16 --kl-divergence-base /tmp/base.kld > "$OUT/kld_base.log" 2>&1
for kv in "q8_0 turbo4" "turbo3 turbo3"; do
    set -- $kv
    "$B/llama-perplexity" -m "$M" -f "$W" -c 512 -b 512 --chunks 10 -fa on -t 16 -ctk "$1" -ctv "$2" \
        --kl-divergence --kl-divergence-base /tmp/base.kld > "$OUT/kld_$1_$2.log" 2>&1
done
for t in f16 q4_0 turbo4 turbo3; do
    "$B/llama-bench" -m "$M" -ctk $t -ctv $t -fa 1 -p 512 -n 64 -d 2048 -r 2 -t 16 -o md 2>&1 | grep -E "^\|" >> "$OUT/bench_t16.md"
done
for t in f16 q4_0 turbo4 turbo3; do
    "$B/llama-bench" -m "$M" -ctk $t -ctv $t -fa 1 -p 512 -n 64 -d 2048 -r 1 -t 2 -o md 2>&1 | grep -E "^\| " | tail -2 >> "$OUT/bench_t2.md"
done
