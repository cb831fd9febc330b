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
GGML_CUDA_TURBO_FA_DEC=16 timeout 150 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=(q8_0|f16),type_V=turbo' > $OUT/tbo-dec16.txt 2>&1; echo "tbo DEC=16 rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-dec16.txt | grep FLASH | tee $OUT/tbo-dec16-summary.txt; tail -2 $OUT/tbo-dec16.txt
GGML_CUDA_TURBO_FA_DEC=17 timeout 100 $B/test-backend-ops -b CUDA0 -o FLASH_ATTN_EXT -p 'type_K=q8_0,type_V=turbo4' > $OUT/tbo-dec17.txt 2>&1; echo "tbo DEC=17 rc $?"
bash scripts/gpu/tbo_summary.sh $OUT/tbo-dec17.txt | grep FLASH | tee $OUT/tbo-dec17-summary.txt
{ [ -x $B/copy-bandwidth ] && $B/copy-bandwidth; } > $OUT/copy-bandwidth.txt 2>&1; tail -2 $OUT/copy-bandwidth.txt
P='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(q8_0|f16),type_V=turbo4,'
F='hsk=256,hsv=256,nh=1,nr23=\[4,1\],kv=32768,nb=1,.*type_K=(f16|q8_0|turbo4),type_V=(f16|q8_0|turbo4),'
fa_rounds fa-hd256-mixed 3 "0 16" "$P" "$F"
wait; tail -1 $OUT/model-g3.log
python3 -c "import random; random.seed(30); print(' '.join('t%d' % random.randrange(1000) for _ in range(3000)))" > /tmp/gen.txt
# kld_ab NAME MODEL K/V BASE_DEC DEC: the vector kernel's logits (DEC=BASE_DEC) as the base, then KLD of a second base
# run and of DEC
kld_ab() {
  local name=$1 m=$2 kv=$3 d0=$4 d1=$5 e
  [ $(left) -lt 60 ] && { echo "stopping before kld $name: $(left) s left"; return 0; }
  local P="$B/llama-perplexity -m $m -f /tmp/gen.txt -ngl 99 -fa on -ctk ${kv%/*} -ctv ${kv#*/} -c 512 --chunks 2 -b 512 -ub 1"
  GGML_CUDA_TURBO_FA_DEC=$d0 timeout 120 $P --kl-divergence-base /tmp/base-$name.kld > $OUT/ppl-base-$name.txt 2>&1 || echo "ppl base $name rc $?"
  for e in $d0 $d1; do
    GGML_CUDA_TURBO_FA_DEC=$e timeout 120 $P --kl-divergence-base /tmp/base-$name.kld --kl-divergence > $OUT/kld-$name-dec$e.txt 2>&1 || echo "kld $name DEC=$e rc $?"
    echo "$name DEC=$e: $(grep -E 'Mean +KLD|Maximum KLD|Same top p' $OUT/kld-$name-dec$e.txt | tr -s ' ' | tr '\n' ';')"
  done
  rm -f /tmp/base-$name.kld
}
if [ -x $B/llama-perplexity ]; then
  kld_ab m8b-q8t4 /tmp/m8b.gguf q8_0/turbo4 0 14
  kld_ab m8b-f16t4 /tmp/m8b.gguf f16/turbo4 0 14
  kld_ab g3-t4 /tmp/g3.gguf turbo4/turbo4 0 15
  kld_ab g3-q8t4 /tmp/g3.gguf q8_0/turbo4 0 16
fi | tee $OUT/kld-summary.txt
echo "done at $(( $(date +%s) - T0 )) s"
