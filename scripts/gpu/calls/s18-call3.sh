# session 18 call 3 (warm): where a decode token's time goes at d0 on the 8B shape, f16 against turbo4 (Nsight
# Compute, gpu__time_duration per kernel, no cache flush, ~3 tokens after the warm-up), summed per kernel by
# scripts/gpu/ncu_step_summary.py; then the -r 3 table of pp512 @ d65536 for f16, q8_0, turbo4, turbo3
. scripts/gpu/calls/common.sh; call_start 3
ensure_build
ensure_m8b
for kv in f16/f16 turbo4/turbo4; do
  timeout 150 ncu --clock-control none --cache-control none --launch-skip 3000 --launch-count 1700 --metrics gpu__time_duration.sum \
    $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 16 -r 1 > $OUT/ncu-step-${kv/\//-}-m8b.txt 2>&1 || echo "ncu $kv rc $?"
done
python3 scripts/gpu/ncu_step_summary.py $OUT/ncu-step-*-m8b.txt | tee $OUT/ncu-step-m8b-summary.txt | head -60
echo "left $(left) s"
t=$(( $(left) - 10 )); [ $t -gt 60 ] && BENCH_ARGS="-p 512 -n 0 -d 65536 -r 3" KVS="f16/f16 q8_0/q8_0 turbo4/turbo4 turbo3/turbo3" DECS=9 timeout $t bash scripts/gpu/roofline.sh bench /tmp/m8b.gguf
echo "done at $(( $(date +%s) - T0 )) s"
