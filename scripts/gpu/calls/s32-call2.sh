# prepared in session 31 (warm, after s32-call1.sh; CALL_LIMIT=N plans for N s): the 8B shape's marks with session 31's
# defaults, f16 beside every turbo type in the same run (session 31 had no time for f16 beside turbo3 with variant 19):
# tg64 at d0 / 16K / 64K, three interleaved rounds of f16, q8_0 (the issue asks for it beside f16), q8_0/turbo4, turbo4, turbo3, turbo2 and turbo2 DEC=20; then
# the whole FLASH_ATTN_EXT turbo set of test-backend-ops at the defaults while time is left.
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
RUNS="f16/f16: q8_0/q8_0: q8_0/turbo4: turbo4/turbo4: turbo3/turbo3: turbo2/turbo2: turbo2/turbo2:GGML_CUDA_TURBO_FA_DEC=20"
tg_env_rounds bench-m8b-defaults.txt 3 0,16384,65536 1 150 "$RUNS"
tbo_dec tbo-fa-all-defaults - $(( $(left) - 15 )) turbo
echo "done at $(( $(date +%s) - T0 )) s"
