# session 30 call 2 (warm, after s30-call1.sh; CALL_LIMIT=N plans for N s): serving the 8B shape with the default
# decode (variant 14), llama-batched-bench with -pps (one prompt decoded and copied to every sequence: the same cache
# and decode steps as npl prompts, without their prefill): an equal batch, 128 x (2048 + 128), f16 and turbo4 in the
# order A B B A; then each type's largest batch of 2048 + 128 that the card holds (issue 26 item 4: f16 131,072 B per
# cell, turbo4 34,816); then the tg64 / pp512 marks at d0 / 16K / 64K in interleaved rounds of f16, q8_0,
# turbo4 and turbo3 as the time allows.
. scripts/gpu/calls/common.sh; call_start 2
ensure_build; ensure_m8b
i=0; for run in f16/f16:128:2048 turbo4/turbo4:128:2048 turbo4/turbo4:128:2048 f16/f16:128:2048; do
  [ $(left) -lt 90 ] && { echo "stopping before $run: $(left) s left"; break; }
  i=$((i + 1)); RTAG=r$i PPS=1 RUNS=$run timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf | grep -v '^columns'
done
echo "equal batch done at $(( $(date +%s) - T0 )) s"
largest_batch f16/f16 131072 2048
largest_batch turbo4/turbo4 34816 2048
echo "largest done at $(( $(date +%s) - T0 )) s"
RUNS="f16/f16: q8_0/q8_0: turbo4/turbo4: turbo3/turbo3:"
PP=512 tg_env_rounds bench-m8b-rounds.txt 3 0,16384,65536 1 40 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
