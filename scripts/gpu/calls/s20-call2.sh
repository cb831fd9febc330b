# session 20 call 2 (cold): build; the one-query FA call at KV 256 .. 131072 (hd 128 / 8 KV heads / GQA 4) for f16 and
# turbo4 with the default (9), variant 13 (the first tile's loads ahead of Q's), and GGML_CUDA_TURBO_FA_NOSPLIT=256 / 512
# (a short cache in one block per head group, no combine kernel); then Nsight Compute source counters of 13 at KV 32768
. scripts/gpu/calls/common.sh; call_start 2
build
SW='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(256|512|1024|2048|8192|16384|32768|65536|131072),nb=1,.*type_K=(f16|turbo4),type_V=(f16|turbo4),'
SWT='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(256|512|1024|2048|8192|16384|32768|65536|131072),nb=1,.*type_K=turbo4,type_V=turbo4,'
for run in 9:0 13:0 13:256 13:512 9:256 9:0 13:0; do dec=${run%:*} ns=${run#*:}
  [ $(left) -lt 25 ] && { echo "stopping: $(left) s left"; break; }
  f=$SWT; [ $run = 9:0 ] && f=$SW
  o=$OUT/fa-sweep-dec$dec-nosplit$ns.txt; [ -e $o ] && o=${o%.txt}-again.txt
  GGML_CUDA_TURBO_FA_DEC=$dec GGML_CUDA_TURBO_FA_NOSPLIT=$ns timeout $(( $(left) - 5 )) $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$f" > $o 2>&1 || echo "sweep $run rc $?"
  echo "DEC=$dec NOSPLIT=$ns: $(sed 's/\x1b\[[0-9;]*m//g' $o | grep -E 'us/run' | sed -E 's/.*kv=([0-9]+).*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+).* ([0-9.]+) us\/run.*/\1 \2 \4;/' | tr '\n' ' ')"
done | tee $OUT/fa-sweep-summary.txt
echo "left $(left) s"
F="hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=turbo4,type_V=turbo4,"
if [ $(left) -gt 90 ]; then
  GGML_CUDA_TURBO_FA_DEC=13 timeout $(( $(left) - 30 )) ncu --clock-control none -k regex:flash_attn_ext_turbo --launch-skip 3 --launch-count 1 \
      --section SourceCounters --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SpeedOfLight \
      -f -o /tmp/ncu-dec13 $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/ncu-run-dec13.txt 2>&1 || echo "ncu rc $?"
  timeout 20 ncu --import /tmp/ncu-dec13.ncu-rep --page source --csv --print-source sass > $OUT/ncu-sass-dec13.csv 2>&1 || echo "export rc $?"
  timeout 10 ncu --import /tmp/ncu-dec13.ncu-rep --print-details all > $OUT/ncu-details-dec13.txt 2>&1 || true
  gzip -f $OUT/ncu-sass-dec13.csv
  grep -E '^ +(Duration|DRAM Throughput|Registers Per|Achieved Active Warps|Issued Warp Per|No Eligible)' $OUT/ncu-details-dec13.txt | sed -E 's/ +/ /g' | sort -u | head -8
fi
echo "done at $(( $(date +%s) - T0 )) s"
