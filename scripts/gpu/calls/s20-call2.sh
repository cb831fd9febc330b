# session 20 call 2 (warm): X = the faster of 11 and 12 for turbo4 in call 1's table (or $1); 8B shape tg64 at d0 / 16K
# / 64K in interleaved rounds of f16, turbo4 DEC 9, turbo4 DEC X (-r 1 each); test-backend-ops FLASH_ATTN_EXT for X;
# Nsight Compute source counters (stall samples per SASS instruction) of 9 and X at KV 32768
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
X=${1:-$(awk -F'|' '$2+0==128 && $6 ~ /turbo4 \/ turbo4/ && ($7+0==11 || $7+0==12) {print $8+0, $7+0}' /tmp/o1/fa-roofline.md 2>/dev/null | sort -n | head -1 | awk '{print $2}')}
X=${X:-11}; echo "variant X = $X"
F="hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=turbo4,type_V=turbo4,"
for dec in 9 $X; do
  GGML_CUDA_TURBO_FA_DEC=$dec timeout 90 ncu --clock-control none -k regex:flash_attn_ext_turbo --launch-skip 3 --launch-count 1 \
      --section SourceCounters --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SpeedOfLight \
      -f -o /tmp/ncu-dec$dec $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT -p "$F" > $OUT/ncu-run-dec$dec.txt 2>&1 || echo "ncu DEC=$dec rc $?"
  ncu --import /tmp/ncu-dec$dec.ncu-rep --page source --csv --print-source sass > $OUT/ncu-sass-dec$dec.csv 2>&1 || echo "export rc $?"
  ncu --import /tmp/ncu-dec$dec.ncu-rep --print-details all > $OUT/ncu-details-dec$dec.txt 2>&1 || true
  gzip -f $OUT/ncu-sass-dec$dec.csv
  grep -E '^ +(Duration|DRAM Throughput|Registers Per|Achieved Active Warps|Issued Warp Per|No Eligible|Theoretical Occupancy)' $OUT/ncu-details-dec$dec.txt | sed -E 's/ +/ /g' | sort -u | head -10
done
echo "left $(left) s"
for r in 1 2 3; do
  for run in f16/f16:9 turbo4/turbo4:9 turbo4/turbo4:$X; do kv=${run%:*} dec=${run#*:}
    [ $(left) -lt 70 ] && { echo "stopping: $(left) s left"; break 2; }
    echo "r$r == $kv DEC=$dec"
    GGML_CUDA_TURBO_FA_DEC=$dec timeout $(( $(left) - 10 )) $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 0,16384,65536 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-rounds.txt
t=$(( $(left) - 5 )); [ $t -gt 40 ] && DECS="$X" timeout $t bash scripts/gpu/roofline.sh check 2>&1 | grep -E 'DEC=|FAIL|ROWS' | head -12
echo "done at $(( $(date +%s) - T0 )) s"
