# session 30 call 4 (warm, right after s30-call3.sh, with OVERLAY_CUDA=1; CALL_LIMIT=N plans for N s): more interleaved
# rounds of call 3's 8B table (tg64 at d0 / 16K / 64K: f16, q8_0, q8_0/turbo4 and f16/turbo4, each new pair also on the
# vector kernel, GGML_CUDA_TURBO_FA_DEC=0), then the FA call alone for the mixed pairs, DEC 0 against 14.
. scripts/gpu/calls/common.sh; call_start 4
ensure_build; ensure_m8b
RUNS="f16/f16: q8_0/q8_0: q8_0/turbo4: q8_0/turbo4:GGML_CUDA_TURBO_FA_DEC=0 f16/turbo4: f16/turbo4:GGML_CUDA_TURBO_FA_DEC=0"
tg_env_rounds bench-m8b-mixed-b.txt 3 0,16384,65536 1 50 "$RUNS"
P='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(q8_0|f16),type_V=turbo4,'
F='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|q8_0|turbo4),type_V=(f16|q8_0|turbo4),'
fa_rounds fa-mixed-b 3 "0 14" "$P" "$F"
echo "done at $(( $(date +%s) - T0 )) s"
