# session 23 call 1 (cold): build; the 8B shape (in the background); test-backend-ops against the CPU for variants 12
# (11 with K's and V's centroids as 7-bit codes, sign-mode lookups) and 13 (K only) on every one-query turbo4/turbo4
# case; copy bandwidth; the one-query FA call (hd 128 / 8 KV heads / GQA 4) at KV 8192 .. 131072 for f16 (round 1)
# and turbo4 with DEC 11, 12, 13, three interleaved rounds (fa_rounds in common.sh: the loop as it ran, moved there
# after the run)
. scripts/gpu/calls/common.sh; call_start 1
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
build
for dec in 12 13; do
  GGML_CUDA_TURBO_FA_DEC=$dec timeout 120 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'nb=1,.*type_K=turbo4,type_V=turbo4' > $OUT/tbo-fa-dec$dec-nb1.txt 2>&1 || echo "check DEC=$dec rc $?"
  echo "DEC=$dec $(bash scripts/gpu/tbo_summary.sh $OUT/tbo-fa-dec$dec-nb1.txt | grep FLASH_ATTN_EXT)"; grep -E "FAIL" $OUT/tbo-fa-dec$dec-nb1.txt | head -5; tail -1 $OUT/tbo-fa-dec$dec-nb1.txt
done
{ [ -x $B/copy-bandwidth ] && $B/copy-bandwidth; } > $OUT/copy-bandwidth.txt 2>&1; tail -1 $OUT/copy-bandwidth.txt
fa_rounds fa-sweep 3 "11 12 13" 'hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(8192|32768|65536|131072),nb=1,.*type_K=turbo4,type_V=turbo4,' \
  'hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(8192|32768|65536|131072),nb=1,.*type_K=(f16|turbo4),type_V=(f16|turbo4),'
wait; tail -1 $OUT/model.log
echo "done at $(( $(date +%s) - T0 )) s"
