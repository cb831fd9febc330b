# session 29 call 2 (warm, after call 1): the table for the 1B shape (Llama-3.2-1B: hd 64, GQA 4, 16 layers) and
# a Gemma-3-shaped model (gemma-3-4b: hd 256, GQA 2, a 1024-token window on 5 of 6 layers): pp512 and tg64 at d0 /
# 16K / 64K, three interleaved rounds (-r 1) of f16, q8_0, turbo4, turbo3 (scripts/gpu/tg_rounds.py: ratios to f16
# of the same run). test-backend-ops first if call 1 did not finish it. CALL_LIMIT=N plans for N s.
. scripts/gpu/calls/common.sh; call_start 2
ensure_build
SHAPE=llama-3.2-1b bash scripts/gpu/roofline.sh model /tmp/m1b.gguf > $OUT/model-1b.log 2>&1 &
SHAPE=gemma-3-4b bash scripts/gpu/roofline.sh model /tmp/g3.gguf > $OUT/model-g3.log 2>&1 &
if ! grep -q "backends passed" /tmp/o1/tbo.txt 2> /dev/null; then
  wait
  timeout 150 $B/test-backend-ops -b CUDA0 -o SET_ROWS,GET_ROWS,CPY,FLASH_ATTN_EXT -p turbo -j 8 > $OUT/tbo.txt 2>&1; echo "tbo rc $?"
  bash scripts/gpu/tbo_summary.sh $OUT/tbo.txt | tee $OUT/tbo-summary.txt; tail -3 $OUT/tbo.txt
fi
wait; tail -1 $OUT/model-1b.log; tail -1 $OUT/model-g3.log
RUNS="f16/f16: q8_0/q8_0: turbo4/turbo4: turbo3/turbo3:"
M=/tmp/m1b.gguf PP=512 tg_env_rounds bench-m1b-rounds.txt 3 0,16384,65536 1 200 "$RUNS"
echo "1B done at $(( $(date +%s) - T0 )) s"
M=/tmp/g3.gguf PP=512 tg_env_rounds bench-g3-rounds.txt 3 0,16384,65536 1 30 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
