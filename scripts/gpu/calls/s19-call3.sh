# session 19 call 3 (warm): tg64 @ d16384 and @ d65536, two interleaved rounds of f16, turbo4 fused, turbo4
# unfused (GGML_CUDA_TURBO_ROT_FUSE=0); then serving at equal batch, llama-batched-bench 128 x (2048 + 128)
# (one stream per sequence: the cache is reshaped before its write, the fused path's second form), f16 and
# turbo4 fused / unfused
. scripts/gpu/calls/common.sh; call_start 3
ensure_build; ensure_m8b
lb() { local e=$1; shift; env "$e" $B/llama-bench -m /tmp/m8b.gguf "$@" -ngl 99 -fa 1 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'; }
for r in 1 2; do
  for run in f16/f16:X=1 turbo4/turbo4:GGML_CUDA_TURBO_ROT_FUSE=1 turbo4/turbo4:GGML_CUDA_TURBO_ROT_FUSE=0; do kv=${run%%:*} e=${run#*:}
    echo "r$r == $kv $e"
    lb $e -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 16384,65536
  done
  [ $(left) -lt 300 ] && { echo "stopping: $(left) s left"; break; }
done | tee $OUT/bench-m8b-depth-rounds.txt
echo "left $(left) s"
for run in f16/f16:X=1 turbo4/turbo4:GGML_CUDA_TURBO_ROT_FUSE=1 turbo4/turbo4:GGML_CUDA_TURBO_ROT_FUSE=0; do kv=${run%%:*} e=${run#*:}
  [ $(left) -lt 80 ] && { echo "stopping: $(left) s left"; break; }
  f=$OUT/batched-${kv/\//-}-${e%%=*}-${e#*=}.txt
  env $e timeout $(( $(left) - 10 )) $B/llama-batched-bench -m /tmp/m8b.gguf -ngl 99 -fa on -ctk ${kv%/*} -ctv ${kv#*/} \
      -c $((128*2176)) -b 2048 -ub 512 -npp 2048 -ntg 128 -npl 128 > $f 2>&1 || echo "FAILED $run"
  printf '%-14s %-28s %s\n' "$kv" "$e" "$(grep -E '^\| +2048 \|' $f | tail -1)"
done | tee $OUT/batched-equal-batch.txt
echo "columns: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |"
echo "done at $(( $(date +%s) - T0 )) s"
