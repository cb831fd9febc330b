# session 23 call 6 (warm, ~4 device minutes left): 8B shape tg64 @ d65536 only, interleaved rounds (-r 1 each) of
# f16, turbo4 DEC 12, turbo4 DEC 11 while time is left
. scripts/gpu/calls/common.sh; call_start 6
ensure_build; ensure_m8b
for r in 1 2 3; do
  for run in f16/f16:- turbo4/turbo4:12 turbo4/turbo4:11; do kv=${run%:*} dec=${run#*:}
    [ $(left) -lt 30 ] && { echo "stopping: $(left) s left"; break 2; }
    label=$kv; [ "$dec" != - ] && label="$kv DEC=$dec"
    echo "r$r == $label"
    GGML_CUDA_TURBO_FA_DEC=${dec/#-/11} $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64 -d 65536 -r 1 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-64k.txt
python3 scripts/gpu/tg_rounds.py $OUT/bench-m8b-64k.txt 2>&1 | tail -5
echo "done at $(( $(date +%s) - T0 )) s"
