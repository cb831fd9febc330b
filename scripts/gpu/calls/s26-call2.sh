# session 26 call 2 (warm, right after call 1): where a d0 decode token's time goes (the d0 mark, 0.91x f16 in
# session 23). Nsight Compute, every kernel of about one token at d0 of the 8B shape, turbo4 and f16 (no warm-up, the
# first tokens skipped), summed per kernel by scripts/gpu/ncu_step_summary.py; then tg64 @ d0 in three interleaved
# rounds: f16, turbo4 (G by the wave rule: 1 at d0), turbo4 with the whole GQA group per block forced
# (GGML_CUDA_TURBO_FA_GQA=4): whether the short cache's FA latency drops with G = 4.
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
ncu_d0_token 200 120
for r in 1 2 3; do
  for run in f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_FA_GQA=4; do kv=${run%%:*} e=${run#*:}
    [ $(left) -lt 30 ] && { echo "stopping: $(left) s left"; break 2; }
    echo "r$r == $kv${e:+ $e}"
    env $e $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 0 -r 2 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-d0-gqa.txt
python3 scripts/gpu/tg_rounds.py $OUT/bench-m8b-d0-gqa.txt 2>&1 | tail -8
echo "done at $(( $(date +%s) - T0 )) s"
