# session 22 call 4 (warm): serving with variant 9 beside 11, interleaved: turbo4 240 x (4096 + 128) and 128 x (2048 + 128)
. scripts/gpu/calls/common.sh; call_start 4
ensure_build; ensure_m8b
RUNS="turbo4/turbo4:240:4096:9 turbo4/turbo4:128:2048:9 turbo4/turbo4:240:4096:11 turbo4/turbo4:128:2048:11" \
    timeout 330 bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf
echo "done at $(( $(date +%s) - T0 )) s"
