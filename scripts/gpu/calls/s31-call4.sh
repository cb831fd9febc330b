# session 31 (cold; OVERLAY_CUDA=1 CALL_LIMIT=N plans for N s): variant 19, turbo3 K and V as index words (written after
# call 3, emulated, compiled for sm_90, not yet run on a GPU). (1) test-backend-ops with GGML_CUDA_TURBO_FA_DEC=19 on
# every FLASH_ATTN_EXT case at hd 64 and 128 with turbo3 K or V beside a turbo, q8_0 or f16 side; (2) FA alone, turbo3 at
# hd 128 (8 K/V heads, GQA 4, KV 32768), the default (variant 6 there) against 19, two rounds; (3) tg64 of the 8B shape
# at 16K / 64K, turbo3 default against 19, interleaved rounds while time is left.
. scripts/gpu/calls/common.sh; call_start 4
cold_start
P='hsk=(64|128),hsv=(64|128),.*type_K=(turbo3,type_V=turbo[234]|(turbo[24]|q8_0|f16),type_V=turbo3),'
tbo_dec tbo-dec19 19 90 "$P"
copy_bw
P='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=turbo3,type_V=turbo3,'
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|turbo4|turbo3),type_V=(f16|turbo4|turbo3),'
fa_rounds fa-t3 2 "14 19" "$P" "$F"
RUNS="turbo3/turbo3: turbo3/turbo3:GGML_CUDA_TURBO_FA_DEC=19"
tg_env_rounds bench-m8b-t3.txt 3 16384,65536 1 45 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
