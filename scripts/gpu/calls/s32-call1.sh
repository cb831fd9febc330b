# prepared in session 31 for the next device session (cold; CALL_LIMIT=N plans for N s): variants 20 (turbo2 K and V as
# index words) and 21 (hd 256 for the turbo pairs other than turbo4/turbo4), written in session 31, emulated, compiled
# for sm_90, not yet run on a GPU, and session 31's defaults. (1) test-backend-ops with GGML_CUDA_TURBO_FA_DEC=20 on
# every FA case at hd 64 and 128 with turbo2 on a side and a turbo, q8_0 or f16 other side, and with 21 on every hd-256
# case of those pairs; (2) at the defaults (no GGML_CUDA_TURBO_FA_DEC): SET_ROWS / GET_ROWS with turbo types, and the FA
# cases session 31 changed: hd 64 and 256 with q8_0 or f16 K and a turbo V, q8_0/turbo4 at hd 128, every pair with turbo3
# at hd 64 / 128; (3) FA alone turbo2/turbo2 (hd 128, GQA 4, KV 32768), the default (variant 6 there) against 20, two
# rounds, f16 / turbo4 / turbo3 in the first.
. scripts/gpu/calls/common.sh; call_start 1
export EXTRA_TARGETS=llama-perplexity  # for s32-call3.sh's KLD on the warm machine (ensure_build builds only when cold)
cold_start
P20='hsk=(64|128),hsv=(64|128),.*type_K=(turbo2,type_V=turbo[234]|(turbo[34]|q8_0|f16),type_V=turbo2),'
tbo_dec tbo-dec20 20 90 "$P20"
tbo_dec tbo-dec21 21 60 'hsk=256,hsv=256,.*type_K=(turbo3,type_V=turbo[234]|turbo2,type_V=turbo[234]|turbo4,type_V=turbo[23]),'
timeout 60 $B/test-backend-ops -b CUDA0 -o SET_ROWS,GET_ROWS -p turbo -j 8 > $OUT/tbo-rows.txt 2>&1 || echo "rows rc $?"
PD='(hsk=(64|256),.*type_K=(q8_0|f16),type_V=turbo|hsk=128,.*type_K=q8_0,type_V=turbo4,|hsk=(64|128),.*type_K=turbo[234],type_V=turbo3,|hsk=(64|128),.*type_K=turbo3,type_V=turbo[234],)'
bash scripts/gpu/tbo_summary.sh $OUT/tbo-rows.txt | grep -E "SET_ROWS|GET_ROWS" | tee $OUT/tbo-rows-summary.txt
tbo_dec tbo-defaults - $(( $(left) - 60 > 150 ? 150 : $(left) - 60 )) "$PD"
copy_bw
P='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=turbo2,type_V=turbo2,'
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|turbo4|turbo3|turbo2),type_V=(f16|turbo4|turbo3|turbo2),'
fa_rounds fa-t2 2 "14 20" "$P" "$F"
echo "done at $(( $(date +%s) - T0 )) s"
