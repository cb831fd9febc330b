# session 18 call 4 (warm): the other real shapes, pp512 @ d65536, two interleaved rounds of f16, turbo4 with the new
# turbo -> f16 conversion and turbo4 with upstream's generic one (GGML_CUDA_TURBO_CVT=0): Llama-3.2-1B (hd 64),
# Qwen2.5-7B (hd 128, GQA 7), Gemma-3-4B (hd 256, sliding windows)
. scripts/gpu/calls/common.sh; call_start 4
ensure_build
for s in llama-3.2-1b qwen2.5-7b gemma-3-4b; do SHAPE=$s bash scripts/gpu/roofline.sh model /tmp/$s.gguf > $OUT/model-$s.log 2>&1 || echo "model $s failed"; done
lb() { local m=$1 e=$2; shift 2; env "$e" $B/llama-bench -m /tmp/$m.gguf "$@" -ngl 99 -fa 1 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'; }
for r in 1 2; do
  for s in llama-3.2-1b qwen2.5-7b gemma-3-4b; do
    for run in f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_CVT=0; do kv=${run%%:*} e=${run#*:}
      echo "$s r$r == $kv ${e:-}"
      lb $s ${e:-X=1} -ctk ${kv%/*} -ctv ${kv#*/} -p 512 -n 0 -d 65536
    done
    [ $(left) -lt 45 ] && { echo "stopping: $(left) s left"; break 2; }
  done
done | tee $OUT/bench-shapes-pp-rounds.txt
echo "done at $(( $(date +%s) - T0 )) s"
