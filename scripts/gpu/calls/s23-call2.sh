# session 23 call 2 (warm): 8B shape, tg64 at d0 / 16K / 64K in three interleaved rounds (-r 1 each) of f16, q8_0,
# turbo4 DEC 11, 12, 13, turbo3 (f16, q8_0 and turbo3 do not read 12/13: turbo3 runs variant 6): every figure beside
# f16 and q8_0 in the same run (tg_rounds in common.sh: the loop as it ran, moved there after the run)
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
tg_rounds bench-m8b-rounds.txt 3 0,16384,65536 "f16/f16:- q8_0/q8_0:- turbo4/turbo4:11 turbo4/turbo4:12 turbo4/turbo4:13 turbo3/turbo3:-"
echo "done at $(( $(date +%s) - T0 )) s"
