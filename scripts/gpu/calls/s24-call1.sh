# session 24 call 1 (cold), written in session 23: build; test-backend-ops against the CPU with DEC 12 (the default,
# now with the generated 7-bit step GGML_TURBO4_CODE7_STEP, emulated only so far) on every one-query turbo4/turbo4
# FA case and every FLASH_ATTN_EXT case of a turbo pair; copy bandwidth; the one-query FA call (hd 128 / 8 KV heads /
# GQA 4) at KV 32768 and 65536, contiguous and in the KV cache's cell layout (permute [0,2,1,3]), f16 and turbo4
# DEC 12 / 11, three interleaved rounds: does the cache's layout cost turbo4's 68-byte rows more than f16's
# (docs/CUDA.md "Session 23": ~0.6 ms of an 8B token at 64K that FA alone does not show)?
. scripts/gpu/calls/common.sh; call_start 1
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
build
timeout 150 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'nb=1,.*type_K=turbo4,type_V=turbo4' > $OUT/tbo-fa-dec12-nb1.txt 2>&1 || echo "check DEC=12 rc $?"
echo "DEC=12 nb=1 $(bash scripts/gpu/tbo_summary.sh $OUT/tbo-fa-dec12-nb1.txt | grep FLASH_ATTN_EXT)"; grep -E "FAIL" $OUT/tbo-fa-dec12-nb1.txt | head -5
timeout 200 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=turbo' > $OUT/tbo-fa-turbo.txt 2>&1 || echo "check turbo K rc $?"
echo "turbo K $(bash scripts/gpu/tbo_summary.sh $OUT/tbo-fa-turbo.txt | grep FLASH_ATTN_EXT)"; grep -E "FAIL" $OUT/tbo-fa-turbo.txt | head -5
{ [ -x $B/copy-bandwidth ] && $B/copy-bandwidth; } > $OUT/copy-bandwidth.txt 2>&1; tail -1 $OUT/copy-bandwidth.txt
fa_rounds fa-layout 3 "12 11" 'hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(32768|65536),nb=1,.*type_K=(f16|turbo4),type_V=(f16|turbo4),'
wait; tail -1 $OUT/model.log
echo "done at $(( $(date +%s) - T0 )) s"
