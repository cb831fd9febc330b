# session 23 call 5 (warm, ~5 device minutes left): 8B shape pp512 @ d65536, two interleaved rounds (-r 2 each) of
# f16 and turbo4 (the prefill: the decode variants do not apply)
. scripts/gpu/calls/common.sh; call_start 5
ensure_build; ensure_m8b
for r in 1 2; do
  for kv in f16/f16 turbo4/turbo4; do
    [ $(left) -lt 45 ] && { echo "stopping: $(left) s left"; break 2; }
    echo "r$r == $kv"
    $B/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 512 -n 0 -d 65536 -r 2 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'
  done
done | tee $OUT/bench-m8b-pp.txt
python3 scripts/gpu/tg_rounds.py $OUT/bench-m8b-pp.txt 2>&1 | tail -4
echo "done at $(( $(date +%s) - T0 )) s"
