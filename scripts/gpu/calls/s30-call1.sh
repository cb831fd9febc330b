# session 30 call 1 (cold; CALL_LIMIT=N plans for N s): variant 15 -- the tensor-core decode at hd 256 (turbo4 K and
# V, a row as two 68-byte halves; written and emulated in session 29, never run on a GPU) -- test-backend-ops with
# GGML_CUDA_TURBO_FA_DEC=15 on every FLASH_ATTN_EXT case with a turbo4 K and V (hd 64/128/256: 15 takes hd 128 and
# 256), FA alone at hd 256 (1 K/V head, GQA 4, KV 32768) in three interleaved rounds of DEC 14 (the vector kernel
# there) and 15, then the Gemma-3-4B shape (hd 256) in interleaved rounds of f16, turbo4 and turbo4 DEC=15: pp512
# and tg64 at d0 / 16K / 64K. The 8B shape is written meanwhile for call 2.
. scripts/gpu/calls/common.sh; call_start 1
SHAPE=gemma-3-4b bash scripts/gpu/roofline.sh model /tmp/g3.gguf > $OUT/model-g3.log 2>&1 &
cold_start
GGML_CUDA_TURBO_FA_DEC=15 timeout 150 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=turbo4,type_V=turbo4' > $OUT/tbo-dec15.txt 2>&1; echo "tbo DEC=15 rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-dec15.txt | grep FLASH | tee $OUT/tbo-dec15-summary.txt; tail -2 $OUT/tbo-dec15.txt
P256='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=turbo4,type_V=turbo4,'
F256='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|turbo4),type_V=(f16|turbo4),'
fa_rounds fa-hd256 3 "14 15" "$P256" "$F256"
wait; tail -1 $OUT/model-g3.log
RUNS="f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=15"
M=/tmp/g3.gguf PP=512 tg_env_rounds bench-g3-dec15.txt 3 0,16384,65536 1 30 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
