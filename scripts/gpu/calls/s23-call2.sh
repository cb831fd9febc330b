# session 23 call 2 (warm): 8B shape, tg64 at d0 / 16K / 64K in three interleaved rounds (-r 1 each) of f16, q8_0,
# turbo4 DEC 11, 12, 13, turbo3 (f16, q8_0 and turbo3 do not read 12/13: turbo3 runs variant 6): every figure beside
# f16 and q8_0 in the same run
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
for r in 1 2 3; do
  for run in f16/f16:- q8_0/q8_0:- turbo4/turbo4:11 turbo4/turbo4:12 turbo4/turbo4:13 turbo3/turbo3:-; do kv=${run%:*} dec=${run#*:}
    [ $(left) -lt 40 ] && { echo "stopping: $(left) s left"; break 2; }
    label=$kv; [ "$dec" != - ] && label="$kv DEC=$dec"
    echo "r$r == $label"
    GGML_CUDA_TURBO_FA_DEC=${dec/#-/11} $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 0,16384,65536 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-rounds.txt
python3 scripts/gpu/tg_rounds.py $OUT/bench-m8b-rounds.txt 2>&1 | tail -14
echo "done at $(( $(date +%s) - T0 )) s"
