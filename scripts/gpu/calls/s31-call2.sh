# prepared in session 30 (warm, after s31-call1.sh; CALL_LIMIT=N plans for N s): the Gemma-3-4B shape (hd 256) with the
# pairs users pick, tg64 at d0 / 16K / 64K in interleaved rounds of f16, q8_0/turbo4 and f16/turbo4, each on the
# vector kernel (DEC=0) and on the tensor-core kernel (DEC=16); then the 8B shape's FA call alone for q8_0/turbo4 and
# f16/turbo4 against this run's copy bandwidth (session 30 measured them against another card's), with DEC 0, 14 and
# 17 (q8_0/turbo4 as aligned words; f16 K: 17 is 14); then tg64 of the 8B shape at d0 / 16K / 64K, q8_0/turbo4 with
# 14 against 17, beside f16.
. scripts/gpu/calls/common.sh; call_start 2
ensure_build
[ -e /tmp/g3.gguf ] || SHAPE=gemma-3-4b bash scripts/gpu/roofline.sh model /tmp/g3.gguf 2>&1 | tail -1
RUNS="f16/f16: q8_0/turbo4:GGML_CUDA_TURBO_FA_DEC=0 q8_0/turbo4:GGML_CUDA_TURBO_FA_DEC=16 f16/turbo4:GGML_CUDA_TURBO_FA_DEC=0 f16/turbo4:GGML_CUDA_TURBO_FA_DEC=16"
M=/tmp/g3.gguf tg_env_rounds bench-g3-mixed.txt 3 0,16384,65536 1 60 "$RUNS"
{ [ -x $B/copy-bandwidth ] && $B/copy-bandwidth; } > $OUT/copy-bandwidth.txt 2>&1; tail -2 $OUT/copy-bandwidth.txt
P='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(q8_0|f16),type_V=turbo4,'
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|q8_0|turbo4),type_V=(f16|q8_0|turbo4),'
fa_rounds fa-mixed 3 "0 14 17" "$P" "$F"
RUNS="f16/f16: q8_0/turbo4: q8_0/turbo4:GGML_CUDA_TURBO_FA_DEC=17"
tg_env_rounds bench-m8b-q8t4-aw.txt 3 0,16384,65536 1 40 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
