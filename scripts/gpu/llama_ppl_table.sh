#!/usr/bin/env bash
# On the GPU machine's 16-core CPU: the foundation PPL table for one model with upstream's
# llama-perplexity built from the patched tree (CPU only), with KLD against f16 as well.
#   scripts/gpu/llama_ppl_table.sh LLAMA_BUILD_BIN MODEL.gguf TEXT OUT_DIR [CHUNKS]
# Every config: -c 512 -b 512 --chunks CHUNKS -fa on -t $(nproc); "rot off" rows set
# LLAMA_ATTN_ROT_DISABLE=1. Writes OUT_DIR/<k>_<v>_rot<on|off>.log and a summary table.
set -uo pipefail
bin=$1; model=$2; text=$3; out=$4; chunks=${5:-20}
t=$(nproc)
base=/tmp/$(basename "$model").kld
common=(-m "$model" -f "$text" -c 512 -b 512 --chunks "$chunks" -fa on -t "$t")
"$bin/llama-perplexity" "${common[@]}" --kl-divergence-base "$base" > "$out/f16_f16.log" 2>&1
echo "| K | V | rot | PPL | KLD | Same top p | RMS dp |" > "$out/table.md"
echo "|---|---|---|---|---|---|---|" >> "$out/table.md"
echo "| f16 | f16 | n/a | $(grep -o 'PPL = [0-9.]* +/- [0-9.]*' "$out/f16_f16.log" | tail -1 | cut -c7-) | 0 | 100 | 0 |" >> "$out/table.md"
for cfg in "q8_0 q8_0 on" "q4_0 q4_0 on" "q8_0 turbo4 on" "q8_0 turbo3 on" "turbo4 turbo4 on" "turbo3 turbo3 on" \
           "turbo4 turbo4 off" "q4_0 q4_0 off"; do
    set -- $cfg
    log="$out/$1_$2_rot$3.log"
    rot=0; [ "$3" = off ] && rot=1
    LLAMA_ATTN_ROT_DISABLE=$rot "$bin/llama-perplexity" "${common[@]}" -ctk "$1" -ctv "$2" \
        --kl-divergence --kl-divergence-base "$base" > "$log" 2>&1
    ppl=$(grep -o 'Mean PPL(Q) *: *[0-9.]* ± *[0-9.]*' "$log" | sed 's/.*: *//')
    kld=$(grep -o 'Mean    KLD: *[0-9.]* ± *[0-9.]*' "$log" | sed 's/.*: *//')
    top=$(grep -o 'Same top p: *[0-9.]* ± *[0-9.]*' "$log" | sed 's/.*: *//')
    rms=$(grep -o 'RMS Δp *: *[0-9.]* ± *[0-9.]*' "$log" | sed 's/.*: *//')
    echo "| $1 | $2 | $3 | $ppl | $kld | $top | $rms |" >> "$out/table.md"
done
cat "$out/table.md"
