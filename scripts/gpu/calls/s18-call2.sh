# session 18 call 2 (warm): 8B shape, three interleaved rounds of pp512 @ d65536 (f16, q8_0/q8_0, turbo4 with the new
# conversion, turbo4 with upstream's generic one (GGML_CUDA_TURBO_CVT=0), turbo3), then three interleaved rounds of
# tg64 @ d65536 (f16, turbo3 decode variant 6 (its default), turbo3 variant 10 (6 + int8 V))
. scripts/gpu/calls/common.sh; call_start 2
ensure_build
ensure_m8b
lb() { local e=$1; shift; env "$e" $B/llama-bench "$@" -m /tmp/m8b.gguf -ngl 99 -fa 1 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'; }
for r in 1 2 3; do
  for run in f16/f16: q8_0/q8_0: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_CVT=0 turbo3/turbo3:; do kv=${run%%:*} e=${run#*:}
    echo "r$r == $kv ${e:-}"
    lb ${e:-X=1} -ctk ${kv%/*} -ctv ${kv#*/} -p 512 -n 0 -d 65536
  done
done | tee $OUT/bench-m8b-pp-rounds.txt
echo "left $(left) s"
for r in 1 2 3; do
  for run in f16/f16:- turbo3/turbo3:6 turbo3/turbo3:10; do kv=${run%:*} dec=${run#*:}
    echo "r$r == $kv DEC=$dec"
    lb GGML_CUDA_TURBO_FA_DEC=${dec/#-/9} -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 65536
  done
  [ $(left) -lt 70 ] && { echo "stopping: $(left) s left"; break; }
done | tee $OUT/bench-m8b-tg-turbo3-rounds.txt
echo "done at $(( $(date +%s) - T0 )) s"
