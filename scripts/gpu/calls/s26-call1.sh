# next session's call 1 (cold), written in session 25: build; the 8B shape; every kernel of about one decode token at
# d65536 under Nsight Compute, f16 and turbo4 (gpu__time_duration, no cache flush), summed per kernel by
# scripts/gpu/ncu_step_summary.py — where session 23's 0.6 ms residual of a 64K turbo4 token goes, now that session
# 25 found it outside the FA kernel. The depth is filled in ONE ubatch (-b/-ub 65536: ~700 prefill kernels instead
# of 128 ubatches' 77k) and without llama-bench's warm-up, so skipping 3000 launches lands in the decode's 3rd-5th
# token whatever the exact prefill count; then FA alone at 64K in three interleaved rounds (the H200's figures
# beside session 23's if an H200 starts).
. scripts/gpu/calls/common.sh; call_start 1
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
build
wait; tail -1 $OUT/model.log
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
for kv in turbo4/turbo4 f16/f16; do
  [ $(left) -lt 120 ] && { echo "stopping before $kv: $(left) s left"; break; }
  timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip 3000 --launch-count 600 \
    $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 8 -d 65536 -b 65536 -ub 65536 -r 1 --no-warmup \
    > $OUT/ncu-step64k-${kv/\//-}.txt 2>&1 || echo "ncu $kv rc $?"
done
python3 scripts/gpu/ncu_step_summary.py $OUT/ncu-step64k-*.txt | tee $OUT/ncu-step64k-summary.txt | head -50
fa_rounds fa64k 3 "12" 'hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=65536,nb=1,.*type_K=(f16|turbo4),type_V=(f16|turbo4),.*permute=\[0,[12],[12],3\]'
echo "done at $(( $(date +%s) - T0 )) s"
