#!/usr/bin/env bash
# On the GPU machine's CPU: llama-perplexity --kl-divergence over a K x V x rotation grid
# against an existing f16 base file; one TSV line per configuration (written as it goes).
#   scripts/gpu/kld_grid.sh BIN MODEL TEXT BASE.kld OUT.tsv CHUNKS "K list" "V list" "rot list"
set -uo pipefail
bin=$1; model=$2; text=$3; base=$4; out=$5; chunks=$6
ks=${7:-"f16 q8_0 q4_0 turbo4 turbo3"}; vs=${8:-"q8_0 q4_0 turbo4 turbo3"}; rots=${9:-"on off"}
printf "ctk\tctv\trot\tppl\tppl_err\tkld\tkld_err\tkld_p99\tsame_top_p\tsame_top_p_err\trms_dp\trms_dp_err\tk_mib\tv_mib\tcells\tseconds\n" > "$out"
for k in $ks; do for v in $vs; do for r in $rots; do
    t0=$(date +%s.%N); rot=0; [ "$r" = off ] && rot=1
    log=$(LLAMA_ATTN_ROT_DISABLE=$rot "$bin/llama-perplexity" -m "$model" -f "$text" -c 512 -b 512 --chunks "$chunks" \
          -fa on -t "$(nproc)" -ctk "$k" -ctv "$v" --kl-divergence --kl-divergence-base "$base" 2>&1)
    t1=$(date +%s.%N)
    g() { echo "$log" | grep -o "$1" | head -1 | sed 's/^[^:]*://' | grep -o '[0-9.]\+' | paste -sd'\t'; }
    kv=$(echo "$log" | grep -o 'size = *[0-9.]* MiB ( *[0-9]* cells.*' | head -1)
    kmib=$(echo "$kv" | sed -n 's/.*K ([a-z0-9_]*): *\([0-9.]*\) MiB.*/\1/p')
    vmib=$(echo "$kv" | sed -n 's/.*V ([a-z0-9_]*): *\([0-9.]*\) MiB.*/\1/p')
    cells=$(echo "$kv" | sed -n 's/.*( *\([0-9]*\) cells.*/\1/p')
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$k" "$v" "$r" \
        "$(g 'Mean PPL(Q) *: *[0-9.]* ± *[0-9.]*')" "$(g 'Mean    KLD: *[0-9.]* ± *[0-9.]*')" \
        "$(g '99.0%   KLD: *[0-9.]*')" "$(g 'Same top p: *[0-9.]* ± *[0-9.]*')" "$(g 'RMS Δp *: *[0-9.]* ± *[0-9.]*')" \
        "$kmib" "$vmib" "$cells" "$(python3 -c "print(round($t1 - $t0, 1))")" >> "$out"
done; done; done
cat "$out"
