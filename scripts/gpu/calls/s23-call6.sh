# session 23 call 6 (warm, ~4 device minutes left): 8B shape tg64 @ d65536 only, interleaved rounds (-r 1 each) of
# f16, turbo4 DEC 12, turbo4 DEC 11 while time is left (tg_rounds in common.sh)
. scripts/gpu/calls/common.sh; call_start 6
ensure_build; ensure_m8b
tg_rounds bench-m8b-64k.txt 3 65536 "f16/f16:- turbo4/turbo4:12 turbo4/turbo4:11"
echo "done at $(( $(date +%s) - T0 )) s"
