# session 32, for a short device budget (cold; CALL_LIMIT=N plans for N s): s32-call1.sh and s32-call2.sh cut to what
# the closing needs first. (1) test-backend-ops at the defaults on the FA cases session 31 changed (the
# pattern PD of s32-call1.sh) and SET_ROWS / GET_ROWS with turbo types; (2) the 8B shape's marks with session 31's
# defaults: tg64 at d0 / 16K / 64K in interleaved rounds of f16, q8_0, q8_0/turbo4, turbo4 and turbo3 (every turbo
# figure beside f16 and q8_0 in the same run), while time is left; (3) the decode call alone at hd 128 (FA, 8 K/V
# heads, GQA 4, 32K cells) for f16 / q8_0 / turbo4 / turbo3 / turbo2 beside this run's copy bandwidth, if time is left.
. scripts/gpu/calls/common.sh; call_start 1
cold_start
PD='(hsk=(64|256),.*type_K=(q8_0|f16),type_V=turbo|hsk=128,.*type_K=q8_0,type_V=turbo4,|hsk=(64|128),.*type_K=turbo[234],type_V=turbo3,|hsk=(64|128),.*type_K=turbo3,type_V=turbo[234],)'
timeout 60 $B/test-backend-ops -b CUDA0 -o SET_ROWS,GET_ROWS -p turbo -j 8 > $OUT/tbo-rows.txt 2>&1 || echo "rows rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-rows.txt | grep -E "SET_ROWS|GET_ROWS" | tee $OUT/tbo-rows-summary.txt
tbo_dec tbo-defaults - $(( $(left) - 200 > 120 ? 120 : $(left) - 200 )) "$PD"
echo "tests done at $(( $(date +%s) - T0 )) s"
RUNS="f16/f16: q8_0/q8_0: q8_0/turbo4: turbo4/turbo4: turbo3/turbo3:"
tg_env_rounds bench-m8b-marks.txt 3 0,16384,65536 1 60 "$RUNS"
copy_bw
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16,type_V=f16|q8_0,type_V=(q8_0|turbo4)|turbo4,type_V=turbo4|turbo3,type_V=turbo3|turbo2,type_V=turbo2),'
[ $(left) -gt 40 ] && timeout $(( $(left) - 10 )) $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/fa-alone.txt 2>&1
sed 's/\x1b\[[0-9;]*m//g' $OUT/fa-alone.txt | grep -E "us/run" | sed -E 's/.*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+),(.*permute=\[([0-9,]+)\])?.* ([0-9.]+) us\/run.*/\1\/\2 \4 \5 us/' | tee $OUT/fa-alone-summary.txt
echo "done at $(( $(date +%s) - T0 )) s"
