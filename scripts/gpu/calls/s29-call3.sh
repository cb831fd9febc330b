# session 29 call 3 (cold; the card this session got was an H100): the FA-alone mark (roofline.sh kernel:
# hd 128 / 8 KV heads / GQA 4 / KV 32768 and hd 64 / GQA 8 / KV 7680, one query, f16, q8_0 and the turbo pairs
# against the copy bandwidth measured in the same run; turbo pairs with the old vector kernel, DEC 0, and the
# default, 12), the hd 256 case (1 KV head, GQA 4, KV 32768), then the 8B shape's table: pp512 and tg64 at d0 /
# 16K / 64K in interleaved rounds (-r 1) of f16, q8_0, turbo4, turbo3, as many rounds (up to 3) as the call has
# time for. CALL_LIMIT=N plans for N s.
. scripts/gpu/calls/common.sh; call_start 3
cold_start
DECS="0 12" OUT=$OUT bash scripts/gpu/roofline.sh kernel 2>&1 | tail -30
P256='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|q8_0|turbo4|turbo3),type_V=(f16|q8_0|turbo4|turbo3),'
fa_rounds fa-hd256 1 "12" "$P256"
echo "FA done at $(( $(date +%s) - T0 )) s"
RUNS="f16/f16: q8_0/q8_0: turbo4/turbo4: turbo3/turbo3:"
PP=512 tg_env_rounds bench-m8b-rounds.txt 3 0,16384,65536 1 45 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
