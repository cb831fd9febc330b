#!/usr/bin/env bash
# On a Mac (Apple Silicon, macOS with Xcode or the Command Line Tools): the checks of the Metal
# turbo kernels that could not run where they were written (docs/METAL.md). Logs go to
# $OUT (default ./out-metal).
#
#   scripts/gpu/metal_check.sh build        tqgguf build --backend metal --tools (embedded library)
#   scripts/gpu/metal_check.sh ops          test-backend-ops on MTL0 vs the CPU: the turbo cases of
#                                       SET_ROWS, GET_ROWS, CPY, FLASH_ATTN_EXT (patch 0004),
#                                       counts per op (OK / FAIL / not supported)
#   scripts/gpu/metal_check.sh ppl MODEL    llama-perplexity, Metal (-ngl 99) and CPU (-ngl 0), for
#                                       f16/f16, q8_0/turbo4, turbo4/turbo4, turbo3/turbo3
#                                       (WikiText-2 test via TEXT=..., 20 chunks of 512)
set -euo pipefail
OUT=${OUT:-$PWD/out-metal}
mkdir -p "$OUT"
BIN=${TQGGUF_CACHE:-$HOME/.cache/tqgguf}/build/tools-metal/bin

case "${1:-}" in
build)
    tqgguf build --backend metal --tools 2>&1 | tee "$OUT/build.log"
    ;;
ops)
    # the library is compiled from source at the first context: a Metal compile error in our
    # kernels shows here as a failed library load, before any test case
    "$BIN/test-backend-ops" -b MTL0 -o SET_ROWS,GET_ROWS,CPY,FLASH_ATTN_EXT -p turbo > "$OUT/test-backend-ops.txt" 2>&1 || true
    bash scripts/gpu/tbo_summary.sh "$OUT/test-backend-ops.txt" | tee "$OUT/test-backend-ops-summary.txt"
    tail -3 "$OUT/test-backend-ops.txt"
    ;;
ppl)
    M=$2; TXT=${TEXT:?set TEXT to wiki.test.raw}
    for kv in f16/f16 q8_0/turbo4 turbo4/turbo4 turbo3/turbo3; do
        for ngl in 99 0; do
            "$BIN/llama-perplexity" -m "$M" -f "$TXT" -c 512 --chunks 20 -b 512 -ngl $ngl -fa on \
                -ctk "${kv%/*}" -ctv "${kv#*/}" > "$OUT/ppl-${kv/\//-}-ngl$ngl.txt" 2>&1 || true
            printf '%-14s ngl %-2s %s\n' "$kv" "$ngl" "$(grep -o 'Final estimate: PPL = [0-9.]* +/- [0-9.]*' "$OUT/ppl-${kv/\//-}-ngl$ngl.txt" || echo FAILED)"
        done
    done | tee "$OUT/ppl-summary.txt"
    ;;
*)
    sed -n 2,14p "$0"; exit 2
    ;;
esac
