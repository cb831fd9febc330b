# session 23 call 4 (warm, ~9 device minutes left): equal batch, 128 x (2048 + 128), f16 and turbo4 DEC 12 and 11;
# then equal memory again (turbo4 240 x (4096 + 128) DEC 12, f16 64 x (4096 + 128)) while time is left
. scripts/gpu/calls/common.sh; call_start 4
ensure_build; ensure_m8b
for run in f16/f16:128:2048 turbo4/turbo4:128:2048:12 turbo4/turbo4:128:2048:11 turbo4/turbo4:240:4096:12 f16/f16:64:4096; do
  need=60; [ "${run#*:}" != "${run#*:240}" ] && need=130
  [ $(left) -lt $need ] && { echo "stopping before $run: $(left) s left"; break; }
  RUNS=$run timeout $(( $(left) - 5 )) bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf | grep -v '^columns'
done
echo "done at $(( $(date +%s) - T0 )) s"
