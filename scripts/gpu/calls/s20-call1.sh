# session 20 call 1 (cold): build; the 8B shape; FA decode alone (hd 128 / 8 KV heads / GQA 4 / KV 32768, and hd 64) for
# the default (9) against variants 11 and 12 (the next tile prefetched into L2) and 10, f16/q8_0 from DEC 0's run;
# the one-query call at KV 2048..131072 (patch 0004's sweep) for f16, q8_0, turbo4 (9, 11, 12), turbo3
. scripts/gpu/calls/common.sh; call_start 1
build
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
DECS="0 9 10 11 12" bash scripts/gpu/roofline.sh kernel 2>&1 | tail -30
echo "left $(left) s"
SW='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(2048|8192|16384|65536|131072),nb=1,.*type_K=(f16|q8_0|turbo4|turbo3),type_V=(f16|q8_0|turbo4|turbo3),'
SWT='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(2048|8192|16384|65536|131072),nb=1,.*type_K=turbo4,type_V=turbo4,'
for dec in 9 11 12; do
  [ $(left) -lt 30 ] && { echo "stopping: $(left) s left"; break; }
  f=$SWT; [ $dec = 9 ] && f=$SW
  GGML_CUDA_TURBO_FA_DEC=$dec timeout $(( $(left) - 10 )) $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$f" > $OUT/fa-sweep-dec$dec.txt 2>&1 || echo "sweep DEC=$dec rc $?"
  sed 's/\x1b\[[0-9;]*m//g' $OUT/fa-sweep-dec$dec.txt | grep -E 'us/run' | sed -E 's/.*kv=([0-9]+).*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+).* ([0-9.]+) us\/run.*/DEC='$dec' kv \1 \2\/\3 \4 us/'
done
wait; tail -1 $OUT/model.log
echo "done at $(( $(date +%s) - T0 )) s"
