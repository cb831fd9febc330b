#!/usr/bin/env bash
# On the GPU machine's CPU: llama-perplexity --kl-divergence for K/V pairs with and without
# K centering (LLAMA_K_CENTER), against an f16 base computed first. One TSV line per run,
# written as it goes.
#   scripts/gpu/k_center_grid.sh BIN MODEL TEXT OUT.tsv CHUNKS "K:V pairs" "LLAMA_K_CENTER values"
# e.g. ... "q4_0:q4_0 turbo3:turbo3" "off file:/tmp/m.k_center.gguf"
# BASE_KLD=FILE: use that f16 base (e.g. the original model's, to score an edited copy)
# instead of computing one from MODEL.
set -uo pipefail
bin=$1; model=$2; text=$3; out=$4; chunks=$5; pairs=$6; kcs=$7
base=${BASE_KLD:-/tmp/$(basename "$model").kld}
common=(-m "$model" -f "$text" -c 512 -b 512 --chunks "$chunks" -fa on -t "$(nproc)")
[ -n "${BASE_KLD:-}" ] || "$bin/llama-perplexity" "${common[@]}" --kl-divergence-base "$base" > "$out.base.log" 2>&1
printf "ctk\tctv\tk_center\tppl\tppl_err\tkld\tkld_err\tkld_p99\tsame_top_p\tsame_top_p_err\tseconds\n" > "$out"
for pair in $pairs; do for kc in $kcs; do
    k=${pair%%:*}; v=${pair##*:}; t0=$(date +%s.%N)
    log=$(LLAMA_K_CENTER=$kc "$bin/llama-perplexity" "${common[@]}" -ctk "$k" -ctv "$v" \
          --kl-divergence --kl-divergence-base "$base" 2>&1)
    t1=$(date +%s.%N)
    echo "$log" | grep -m1 "k_center =" >&2
    g() { echo "$log" | grep -o "$1" | head -1 | sed 's/^[^:]*://' | grep -o '[0-9.]\+' | paste -sd'\t'; }
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$k" "$v" "${kc##*/}" \
        "$(g 'Mean PPL(Q) *: *[0-9.]* ± *[0-9.]*')" "$(g 'Mean    KLD: *[0-9.]* ± *[0-9.]*')" \
        "$(g '99.0%   KLD: *[0-9.]*')" "$(g 'Same top p: *[0-9.]* ± *[0-9.]*')" \
        "$(python3 -c "print(round($t1 - $t0, 1))")" >> "$out"
done; done
cat "$out"
