#!/usr/bin/env bash
# Counts per op of a test-backend-ops log: OK, FAIL and "not supported" lines of SET_ROWS,
# GET_ROWS, CPY and FLASH_ATTN_EXT (the turbo cache's ops).
#   scripts/gpu/tbo_summary.sh test-backend-ops.txt
set -euo pipefail
log=$1
for op in SET_ROWS GET_ROWS CPY FLASH_ATTN_EXT; do
    printf '%-16s OK %5d  FAIL %4d  not supported %4d\n' "$op" \
        "$(grep -c "^  $op(.*OK" "$log" || true)" \
        "$(grep -c "^  $op(.*FAIL" "$log" || true)" \
        "$(grep -c "^  $op(.*not supported" "$log" || true)"
done
