# session 22 call 5 (warm): equal batch 128 x (2048 + 128) again, variants 11 and 9 in turn twice, then f16
. scripts/gpu/calls/common.sh; call_start 5
ensure_build; ensure_m8b
RUNS="turbo4/turbo4:128:2048:11 turbo4/turbo4:128:2048:9 turbo4/turbo4:128:2048:11 turbo4/turbo4:128:2048:9 f16/f16:128:2048" \
    timeout 250 bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf
echo "done at $(( $(date +%s) - T0 )) s"
