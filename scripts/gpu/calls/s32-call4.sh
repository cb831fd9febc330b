# prepared in session 31 (warm; CALL_LIMIT=N plans for N s): variant 21 (hd 256 for the turbo pairs other than
# turbo4/turbo4) on the Gemma-3-4B shape: FA alone at hd 256 (1 K/V head, GQA 4, KV 32768), turbo3/turbo3 and
# turbo2/turbo2, the default (the vector kernel there) against 21, two rounds; tg64 at d0 / 16K / 64K, three
# interleaved rounds of f16, turbo3, turbo3 DEC=21, turbo4/turbo3 and turbo4/turbo3 DEC=21.
. scripts/gpu/calls/common.sh; call_start 4
ensure_build
[ -e /tmp/g3.gguf ] || SHAPE=gemma-3-4b bash scripts/gpu/roofline.sh model /tmp/g3.gguf 2>&1 | tail -1
copy_bw
P='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(turbo3|turbo2),type_V=(turbo3|turbo2),'
F='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|turbo4|turbo3|turbo2),type_V=(f16|turbo4|turbo3|turbo2),'
fa_rounds fa-hd256-t32 2 "14 21" "$P" "$F"
RUNS="f16/f16: turbo3/turbo3: turbo3/turbo3:GGML_CUDA_TURBO_FA_DEC=21 turbo4/turbo3: turbo4/turbo3:GGML_CUDA_TURBO_FA_DEC=21"
M=/tmp/g3.gguf tg_env_rounds bench-g3-t3.txt 3 0,16384,65536 1 40 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
