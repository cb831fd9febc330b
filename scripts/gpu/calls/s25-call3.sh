# session 25 call 3 (cold, ~10 device minutes left, an H100 if that is what starts): build; the 8B shape; tg64 @ d65536
# of f16, turbo4 (variant 12) and turbo3 in interleaved rounds (-r 1 each) while time is left: the 64K decode on the
# H100 beside session 23's H200 figures
. scripts/gpu/calls/common.sh; call_start 3
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
build
wait; tail -1 $OUT/model.log
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
tg_rounds bench-m8b-64k.txt 2 65536 "f16/f16:- turbo4/turbo4:12 turbo3/turbo3:-"
echo "done at $(( $(date +%s) - T0 )) s"
