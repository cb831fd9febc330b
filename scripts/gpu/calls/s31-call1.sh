# prepared in session 30 for the next device session (cold; CALL_LIMIT=N plans for N s): session 30's kernels checked
# where no GPU has run them yet. (1) test-backend-ops with GGML_CUDA_TURBO_FA_DEC=16 on every FLASH_ATTN_EXT case with
# q8_0 or f16 K and a turbo V (16 adds hd 256 to hd 128's tensor-core path for those pairs), and with 17 (q8_0 K and
# turbo4 V as aligned words) on every q8_0/turbo4 case; (2) FA alone at hd 256
# (1 K/V head, GQA 4, KV 32768) for q8_0/turbo4 and f16/turbo4, DEC 0 (the vector kernel) against 16, three rounds,
# and the copy bandwidth of this run; (3) the decode path's logits in llama-perplexity (-ub 1: every token a one-query
# FA call; 2 chunks of 512 of generated text), KLD of the tensor-core kernels against the vector kernel's logits, and
# of a second vector-kernel run (the floor): the 8B shape with q8_0/turbo4 and f16/turbo4 (DEC 14 against 0), the
# Gemma-3-4B shape with turbo4/turbo4 (the hd-256 default, 15, against 0) and q8_0/turbo4 (16 against 0).
. scripts/gpu/calls/common.sh; call_start 1
export EXTRA_TARGETS=llama-perplexity
SHAPE=gemma-3-4b bash scripts/gpu/roofline.sh model /tmp/g3.gguf > $OUT/model-g3.log 2>&1 &
cold_start
tbo_dec tbo-dec16 16 150 'type_K=(q8_0|f16),type_V=turbo'
tbo_dec tbo-dec17 17 100 'type_K=q8_0,type_V=turbo4'
copy_bw
P='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(q8_0|f16),type_V=turbo4,'
F='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|q8_0|turbo4),type_V=(f16|q8_0|turbo4),'
fa_rounds fa-hd256-mixed 3 "0 16" "$P" "$F"
wait; tail -1 $OUT/model-g3.log
gen_text
if [ -x $B/llama-perplexity ]; then
  kld_ab m8b-q8t4 /tmp/m8b.gguf q8_0/turbo4 0 14
  kld_ab m8b-f16t4 /tmp/m8b.gguf f16/turbo4 0 14
  kld_ab g3-t4 /tmp/g3.gguf turbo4/turbo4 0 15
  kld_ab g3-q8t4 /tmp/g3.gguf q8_0/turbo4 0 16
fi | tee $OUT/kld-summary.txt
echo "done at $(( $(date +%s) - T0 )) s"
