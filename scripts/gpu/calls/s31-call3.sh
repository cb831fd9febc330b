# session 31 (warm, after s31-call2.sh; CALL_LIMIT=N plans for N s): variant 18, the tensor-core decode at hd 64 (every
# turbo pair and q8_0 / f16 K with a turbo V; written this session, emulated, compiled for sm_90, not yet run on a GPU).
# This checkout's changed CUDA sources go over the built tree and only what includes them is compiled again (a cold
# machine: the whole build with them). (1) test-backend-ops with GGML_CUDA_TURBO_FA_DEC=18 on every FLASH_ATTN_EXT case
# at hd 64 with a turbo V and a turbo, q8_0 or f16 K; (2) FA alone at hd 64, DEC 1 (variant 1 / the vector kernel: what
# hd 64 runs now) against 18, two rounds, f16 in the first; (3) the Llama-3.2-1B shape (hd 64, GQA 4), tg64 at d0 / 16K /
# 64K in interleaved rounds of f16, turbo4, turbo4 DEC=18, q8_0/turbo4, q8_0/turbo4 DEC=18.
. scripts/gpu/calls/common.sh; call_start 3
W=/tmp/tqr
if [ -x $B/llama-bench ] && [ -d $W/llama.cpp/ggml/src/ggml-cuda ]; then
  for f in native/ggml/src/ggml-cuda/*; do
    cmp -s $f $W/llama.cpp/ggml/src/ggml-cuda/${f##*/} || { cp $f $W/llama.cpp/ggml/src/ggml-cuda/; echo "changed: ${f##*/}"; }
  done
  cmake --build $W/build -j $(nproc) --target test-backend-ops llama-bench > $OUT/rebuild.log 2>&1 || { grep -E "error" $OUT/rebuild.log | head -30; exit 1; }
  echo "rebuilt at $(( $(date +%s) - T0 )) s ($(grep -c 'Building CUDA' $OUT/rebuild.log) CUDA objects)"
else
  echo "machine lost its build: building with the overlay"; OVERLAY_CUDA=1 build
fi
SHAPE=llama-3.2-1b bash scripts/gpu/roofline.sh model /tmp/l1b.gguf > $OUT/model-l1b.log 2>&1 &
tbo_dec tbo-dec18 18 120 'hsk=64,hsv=64,.*type_K=(turbo[0-9]|q8_0|f16),type_V=turbo'
copy_bw
P='hsk=64,hsv=64,nh=8,nr23=\[(4|8),1\],kv=(7680|32768),nb=1,.*type_K=(q8_0|turbo4),type_V=turbo4,'
F='hsk=64,hsv=64,nh=8,nr23=\[(4|8),1\],kv=(7680|32768),nb=1,.*type_K=(f16|q8_0|turbo4),type_V=(f16|turbo4),'
fa_rounds fa-hd64 2 "1 18" "$P" "$F"
wait; tail -1 $OUT/model-l1b.log
RUNS="f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=18 q8_0/turbo4: q8_0/turbo4:GGML_CUDA_TURBO_FA_DEC=18"
M=/tmp/l1b.gguf tg_env_rounds bench-l1b-dec18.txt 3 0,16384,65536 1 25 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
