# session 20 call 3 (warm): serving, llama-batched-bench S_TG: equal KV memory (f16 64 x (4096 + 128) against turbo4 240 x
# (4096 + 128)) and equal batch 128 x (2048 + 128), turbo4 with DEC 9 and DEC X (call 2's X, or $1), alternating
. scripts/gpu/calls/common.sh; call_start 3
ensure_build; ensure_m8b
X=${1:-$(awk -F'|' '$2+0==128 && $6 ~ /turbo4 \/ turbo4/ && ($7+0==11 || $7+0==12) {print $8+0, $7+0}' /tmp/o1/fa-roofline.md 2>/dev/null | sort -n | head -1 | awk '{print $2}')}
X=${X:-11}; echo "variant X = $X"
for run in ${RUNS:-turbo4/turbo4:$X:240:4096 turbo4/turbo4:9:240:4096 f16/f16:9:64:4096 turbo4/turbo4:9:128:2048 turbo4/turbo4:$X:128:2048 f16/f16:9:128:2048 turbo4/turbo4:$X:240:4096}; do
  IFS=: read -r kv dec npl npp <<< "$run"
  [ $(left) -lt 60 ] && { echo "stopping: $(left) s left"; break; }
  f=$OUT/batched-${kv/\//-}-dec$dec-$npl-$npp.txt; [ -e $f ] && f=${f%.txt}-again.txt
  GGML_CUDA_TURBO_FA_DEC=$dec timeout $(( $(left) - 10 )) $B/llama-batched-bench -m /tmp/m8b.gguf -ngl 99 -fa on -ctk ${kv%/*} -ctv ${kv#*/} \
      -c $((npl*(npp+128))) -b 2048 -ub 512 -npp $npp -ntg 128 -npl $npl > $f 2>&1 || echo "FAILED $run"
  printf '%-14s DEC=%-2s npl %3s npp %4s %s\n' "$kv" "$dec" "$npl" "$npp" "$(grep -E "^\| +$npp \|" $f | tail -1)"
done | tee $OUT/batched-rounds.txt
echo "columns: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |"
echo "done at $(( $(date +%s) - T0 )) s"
