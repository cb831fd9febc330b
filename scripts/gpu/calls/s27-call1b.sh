# session 27 call 1b (cold, with ~600 device seconds left): s27-call1.sh cut to its core, the d0 decode token's launch
# overlap: build, the 8B shape, then tg64 @ d0 in interleaved rounds (-r 2 each) of f16, turbo4, turbo4 with the
# Hadamard kernel's early launch trigger (GGML_CUDA_FWHT_LC=1), turbo4 without the rotation; CALL_LIMIT=N plans the
# rounds for N seconds.
. scripts/gpu/calls/common.sh; call_start 1
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
ensure_build
wait; tail -1 $OUT/model.log
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
RUNS="f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_FWHT_LC=1 turbo4/turbo4:LLAMA_ATTN_ROT_DISABLE=1"
for r in 1 2 3 4; do
  for run in $RUNS; do kv=${run%%:*} e=${run#*:}
    [ $(left) -lt 15 ] && { echo "stopping rounds: $(left) s left"; break 2; }
    echo "r$r == $kv${e:+ $e}"
    env $e $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 0 -r 2 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-d0.txt
python3 scripts/gpu/tg_rounds.py $OUT/bench-m8b-d0.txt 2>&1 | tail -6
echo "done at $(( $(date +%s) - T0 )) s"
