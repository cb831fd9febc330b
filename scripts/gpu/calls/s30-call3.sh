# session 30 call 3 (cold; run with OVERLAY_CUDA=1 so that the build takes this checkout's native/ggml/src/ggml-cuda/
# over the packed tree; CALL_LIMIT=N plans for N s): the tensor-core decode for q8_0 or f16 K with a turbo V (the
# README's quality pair q8_0/turbo4 and `--ctv turbo4` alone, f16/turbo4; before it both ran upstream's vector kernel
# with turbo instances, which GGML_CUDA_TURBO_FA_DEC=0 still picks). test-backend-ops on every FLASH_ATTN_EXT case
# with q8_0 or f16 K and a turbo V; the 8B shape's tg64 at d0 / 16K / 64K in interleaved rounds of f16, q8_0,
# q8_0/turbo4 and f16/turbo4, each new pair also with DEC=0; then the FA call alone (hd 128, 8 K/V heads, GQA 4,
# KV 32768) in rounds of DEC 0 and 14 (the default), as the time allows.
. scripts/gpu/calls/common.sh; call_start 3
cold_start
timeout 150 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=(q8_0|f16),type_V=turbo' > $OUT/tbo-kq8f16.txt 2>&1; echo "tbo q8_0/f16 K rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-kq8f16.txt | grep FLASH | tee $OUT/tbo-kq8f16-summary.txt; tail -2 $OUT/tbo-kq8f16.txt
RUNS="f16/f16: q8_0/q8_0: q8_0/turbo4: q8_0/turbo4:GGML_CUDA_TURBO_FA_DEC=0 f16/turbo4: f16/turbo4:GGML_CUDA_TURBO_FA_DEC=0"
tg_env_rounds bench-m8b-mixed.txt 3 0,16384,65536 1 60 "$RUNS"
P='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(q8_0|f16),type_V=turbo4,'
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|q8_0|turbo4),type_V=(f16|q8_0|turbo4),'
fa_rounds fa-mixed 3 "0 14" "$P" "$F"
echo "done at $(( $(date +%s) - T0 )) s"
