# session 31 (warm, after s31-call2.sh; CALL_LIMIT=N plans for N s; REBUILD=1 with OVERLAY_CUDA=1 builds this
# checkout's CUDA sources again first): (1) test-backend-ops at the defaults (no GGML_CUDA_TURBO_FA_DEC) on every
# FLASH_ATTN_EXT case with a turbo K or V, and on SET_ROWS / GET_ROWS with turbo types: the issue's 0 FAIL and 0 "not
# supported" for every turbo pair and head dim, as users get it; (2) the Llama-3.2-1B shape (hd 64, GQA 4), tg64 at
# d0 / 16K / 64K in interleaved rounds of f16, q8_0, turbo4, turbo3, q8_0/turbo4 at the defaults.
. scripts/gpu/calls/common.sh; call_start 3
if [ -n "${REBUILD:-}" ]; then build; else ensure_build; fi
SHAPE=llama-3.2-1b bash scripts/gpu/roofline.sh model /tmp/l1b.gguf > $OUT/model-l1b.log 2>&1 &
timeout 120 $B/test-backend-ops -b CUDA0 -o SET_ROWS,GET_ROWS -p turbo -j 8 > $OUT/tbo-rows.txt 2>&1 || echo "rows rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-rows.txt | grep -E "SET_ROWS|GET_ROWS" | tee $OUT/tbo-defaults-summary.txt
timeout $(( $(left) - 150 > 330 ? 330 : $(left) - 150 )) $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p turbo -j 8 > $OUT/tbo-fa-defaults.txt 2>&1 || echo "FA rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-fa-defaults.txt | grep FLASH | tee -a $OUT/tbo-defaults-summary.txt
grep -E "FAIL" $OUT/tbo-fa-defaults.txt | head -20; tail -2 $OUT/tbo-fa-defaults.txt
echo "tbo done at $(( $(date +%s) - T0 )) s"
wait; tail -1 $OUT/model-l1b.log
RUNS="f16/f16: q8_0/q8_0: turbo4/turbo4: turbo3/turbo3: q8_0/turbo4:"
M=/tmp/l1b.gguf tg_env_rounds bench-l1b-rounds.txt 3 0,16384,65536 1 30 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
