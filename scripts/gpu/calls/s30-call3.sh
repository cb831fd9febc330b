# session 30 call 3 (cold; run with OVERLAY_CUDA=1 so that the build takes this checkout's native/ggml/src/ggml-cuda/
# over the packed tree; CALL_LIMIT=N plans for N s): the tensor-core decode for q8_0 K with a turbo V (the README's
# quality pair q8_0/turbo4; before it, upstream's vector kernel with turbo instances). test-backend-ops on every
# FLASH_ATTN_EXT case with q8_0 K and a turbo V (the default, 14: V's words loaded before K.Q, 2 blocks per SM);
# the 8B shape's pp512 / tg64 at d0 / 16K / 64K in interleaved rounds of f16, q8_0, q8_0/turbo4 and q8_0/turbo4 on the
# vector kernel (GGML_CUDA_TURBO_FA_DEC=0); then the FA call alone (hd 128, 8 K/V heads, GQA 4, KV 32768) in rounds of
# DEC 0, 14 and 10 (V's words read in P.V, 3 blocks per SM), and test-backend-ops with DEC=10, as the time allows.
. scripts/gpu/calls/common.sh; call_start 3
cold_start
timeout 150 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=q8_0,type_V=turbo' > $OUT/tbo-q8.txt 2>&1; echo "tbo q8_0 K rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-q8.txt | grep FLASH | tee $OUT/tbo-q8-summary.txt; tail -2 $OUT/tbo-q8.txt
RUNS="f16/f16: q8_0/q8_0: q8_0/turbo4: q8_0/turbo4:GGML_CUDA_TURBO_FA_DEC=0"
PP=512 tg_env_rounds bench-m8b-q8t4.txt 3 0,16384,65536 1 110 "$RUNS"
P='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=q8_0,type_V=turbo4,'
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|q8_0|turbo4),type_V=(f16|q8_0|turbo4),'
fa_rounds fa-q8t4 3 "0 14 10" "$P" "$F"
if [ $(left) -gt 60 ]; then
  GGML_CUDA_TURBO_FA_DEC=10 timeout $(( $(left) - 10 )) $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=q8_0,type_V=turbo' > $OUT/tbo-q8-dec10.txt 2>&1; echo "tbo q8_0 K DEC=10 rc $?"
  bash scripts/gpu/tbo_summary.sh $OUT/tbo-q8-dec10.txt | grep FLASH | tee $OUT/tbo-q8-dec10-summary.txt
fi
echo "done at $(( $(date +%s) - T0 )) s"
