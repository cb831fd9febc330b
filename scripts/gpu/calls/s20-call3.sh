# session 20 call 3 (warm): the 8B shape, tg64 at d0 / 16K / 64K in interleaved rounds (-r 1 each) of f16, turbo4 with
# the default (9), variant 13, and 13 with GGML_CUDA_TURBO_FA_NOSPLIT=${NS:-256}; then test-backend-ops FLASH_ATTN_EXT
# for 13 (every turbo case) with that NOSPLIT
. scripts/gpu/calls/common.sh; call_start 3
ensure_build; ensure_m8b
NS=${NS:-256}
for r in 1 2; do
  for run in f16/f16:9:0 turbo4/turbo4:9:0 turbo4/turbo4:13:0 turbo4/turbo4:13:$NS; do IFS=: read -r kv dec ns <<< "$run"
    [ $(left) -lt 150 ] && { echo "stopping: $(left) s left"; break 2; }
    echo "r$r == $kv DEC=$dec NOSPLIT=$ns"
    GGML_CUDA_TURBO_FA_DEC=$dec GGML_CUDA_TURBO_FA_NOSPLIT=$ns timeout $(( $(left) - 10 )) $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 0,16384,65536 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-rounds.txt
t=$(( $(left) - 5 )); [ $t -gt 40 ] && GGML_CUDA_TURBO_FA_NOSPLIT=$NS DECS="13" timeout $t bash scripts/gpu/roofline.sh check 2>&1 | grep -E 'DEC=|FAIL|ROWS' | head -12
echo "done at $(( $(date +%s) - T0 )) s"
