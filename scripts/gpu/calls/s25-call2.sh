# session 25 call 2 (warm): where a turbo4 token's time goes at depth 64K on the 8B shape. Nsight Compute,
# gpu__time_duration per kernel, no cache flush, only the decode's kernels (the regex leaves out the prefill's:
# mul_mat_q, flash_attn_ext_f16, k_turbo_to), summed per kernel by scripts/gpu/ncu_step_summary.py: the FA and
# combine kernels inside the model against the same call alone (test-backend-ops, contiguous and in the cache's
# cell layout, permute [0,2,1,3]) under the same ncu settings. f16 likewise (its decode kernel at depth is
# flash_attn_ext_vec if the d0 profile of session 18 holds at 64K; if not, its file shows mul_mat_vec only).
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
NCU="ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum"
for kv in turbo4/turbo4 f16/f16; do
  [ $(left) -lt 150 ] && { echo "stopping before model $kv: $(left) s left"; break; }
  timeout 200 $NCU -k 'regex:flash_attn_ext_turbo|flash_attn_ext_vec|flash_attn_combine|mul_mat_vec' --launch-count 580 \
    $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 4 -d 65536 -r 1 > $OUT/ncu-64k-model-${kv/\//-}.txt 2>&1 || echo "ncu model $kv rc $?"
  echo "model $kv at $(( $(date +%s) - T0 )) s"
done
for kv in turbo4 f16; do for p in '0,1,2,3' '0,2,1,3'; do
  [ $(left) -lt 30 ] && { echo "stopping before alone $kv $p: $(left) s left"; break 2; }
  timeout 60 $NCU -k 'regex:flash_attn|combine' --launch-skip 10 --launch-count 20 $B/test-backend-ops perf -b CUDA0 -o FLASH_ATTN_EXT \
    -p "hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=65536,nb=1,.*type_K=$kv,type_V=$kv,.*permute=\[$p\]" > $OUT/ncu-64k-alone-$kv-${p//,/}.txt 2>&1 || echo "ncu alone $kv $p rc $?"
done; done
python3 scripts/gpu/ncu_step_summary.py $OUT/ncu-64k-*.txt | tee $OUT/ncu-64k-summary.txt
echo "done at $(( $(date +%s) - T0 )) s"
