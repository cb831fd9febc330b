# session 29 call 3 (cold; the card this session got was an H100): variant 14 of the turbo4 decode (12 with the first
# tile's K words loaded before Q, k_first in turbo-fattn-mma.cuh) -- test-backend-ops on every turbo4/turbo4
# FLASH_ATTN_EXT case with DEC 14, then FA alone (hd 128 / 8 KV heads / GQA 4, one query) at 256-2,048 and 32,768 cells
# in three interleaved rounds of DEC 12 and 14 (f16 in the first), then tg64 @ d0 of the 8B shape, three interleaved
# rounds (-r 2) of f16, turbo4 and turbo4 DEC 14; then the FA-alone mark (roofline.sh kernel: the copy bandwidth
# measured in the same run, f16 / q8_0 / turbo pairs, DEC 0 and 12) and, time left, the 8B table (pp512 and tg64 at
# d0 / 16K / 64K, interleaved rounds of f16, q8_0, turbo4, turbo3). CALL_LIMIT=N plans for N s.
. scripts/gpu/calls/common.sh; call_start 3
cold_start
GGML_CUDA_TURBO_FA_DEC=14 timeout 120 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=turbo4,type_V=turbo4' > $OUT/tbo-dec14.txt 2>&1; echo "tbo DEC=14 rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-dec14.txt | grep FLASH | tee $OUT/tbo-dec14-summary.txt; tail -2 $OUT/tbo-dec14.txt
short_cache_ab fa-k14 "256|512|1024|2048|32768" "12 14" bench-m8b-d0-k14.txt 200 \
  "f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=14"
[ $(left) -gt 150 ] && DECS="0 12" OUT=$OUT bash scripts/gpu/roofline.sh kernel 2>&1 | tail -24
RUNS="f16/f16: q8_0/q8_0: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=14 turbo3/turbo3:"
PP=512 tg_env_rounds bench-m8b-rounds.txt 3 0,16384,65536 1 45 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
