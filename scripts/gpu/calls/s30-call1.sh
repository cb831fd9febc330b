# prepared in session 29 for the next device session (cold; CALL_LIMIT=N plans for N s): the 8B marks with the
# variant-14 default on whichever card comes (session 29 had only H100s): pp512 and tg64 at d0 / 16K / 64K in three
# interleaved rounds (-r 1) of f16, q8_0, turbo4, turbo3; then serving at an equal batch (128 x (2048 + 128)), which
# session 29's call 4 had no time for, f16 against turbo4.
. scripts/gpu/calls/common.sh; call_start 1
cold_start
RUNS="f16/f16: q8_0/q8_0: turbo4/turbo4: turbo3/turbo3:"
PP=512 tg_env_rounds bench-m8b-rounds.txt 3 0,16384,65536 1 150 "$RUNS"
for run in f16/f16:128:2048 turbo4/turbo4:128:2048; do
  [ $(left) -lt 70 ] && { echo "stopping before $run: $(left) s left"; break; }
  RUNS=$run timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf | grep -v '^columns'
done
echo "done at $(( $(date +%s) - T0 )) s"
