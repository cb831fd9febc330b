# session 19 call 4 (warm): serving again, llama-batched-bench S_TG: equal batch 128 x (2048 + 128) with turbo4 unfused
# then fused (the reverse of call 3's order); equal KV memory: f16 64 x (4096 + 128) against turbo4 240 x (4096 + 128)
# fused and unfused (GGML_CUDA_TURBO_ROT_FUSE=0)
# Call 5 was this script with CALL=5 RUNS="turbo4/turbo4:0:240:4096 turbo4/turbo4:1:240:4096" (equal memory again,
# unfused first).
. scripts/gpu/calls/common.sh; call_start ${CALL:-4}
ensure_build; ensure_m8b
for run in ${RUNS:-turbo4/turbo4:0:128:2048 turbo4/turbo4:1:128:2048 f16/f16:1:64:4096 turbo4/turbo4:1:240:4096 turbo4/turbo4:0:240:4096}; do
  IFS=: read -r kv fuse npl npp <<< "$run"
  [ $(left) -lt 60 ] && { echo "stopping: $(left) s left"; break; }
  f=$OUT/batched-${kv/\//-}-fuse$fuse-$npl-$npp.txt
  GGML_CUDA_TURBO_ROT_FUSE=$fuse timeout $(( $(left) - 10 )) $B/llama-batched-bench -m /tmp/m8b.gguf -ngl 99 -fa on -ctk ${kv%/*} -ctv ${kv#*/} \
      -c $((npl*(npp+128))) -b 2048 -ub 512 -npp $npp -ntg 128 -npl $npl > $f 2>&1 || echo "FAILED $run"
  printf '%-14s fuse=%s npl %3s npp %4s %s\n' "$kv" "$fuse" "$npl" "$npp" "$(grep -E "^\| +$npp \|" $f | tail -1)"
done | tee $OUT/batched-rounds.txt
echo "columns: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |"
echo "done at $(( $(date +%s) - T0 )) s"
