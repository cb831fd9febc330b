# prepared in session 31 (warm; CALL_LIMIT=N plans for N s; EXTRA_TARGETS=llama-perplexity if the machine is cold): the
# decode path's KLD of session 31's kernels in a model (llama-perplexity -ub 1, 2 chunks of 512 generated tokens, the
# vector kernel or the previous code as the base, a second base run as the floor): the 1B shape q8_0/turbo4 (hd 64,
# variant 18, against the vector kernel), the 8B shape turbo3 (19 against 6) and turbo2 (20 against 6); then why
# variant 18 trails variant 1 for turbo K at 16K on the 1B shape: tg64 @ 16K, interleaved rounds of turbo4 DEC 1 / 18,
# and 18 with the heads per block forced to 2 and 1 (GGML_CUDA_TURBO_FA_GQA).
. scripts/gpu/calls/common.sh; call_start 3
export EXTRA_TARGETS=llama-perplexity
ensure_build; ensure_m8b
[ -e /tmp/l1b.gguf ] || SHAPE=llama-3.2-1b bash scripts/gpu/roofline.sh model /tmp/l1b.gguf 2>&1 | tail -1
python3 -c "import random; random.seed(30); print(' '.join('t%d' % random.randrange(1000) for _ in range(3000)))" > /tmp/gen.txt
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
  kld_ab l1b-q8t4 /tmp/l1b.gguf q8_0/turbo4 0 18
  kld_ab m8b-t3 /tmp/m8b.gguf turbo3/turbo3 6 19
  kld_ab m8b-t2 /tmp/m8b.gguf turbo2/turbo2 6 20
fi | tee $OUT/kld-summary.txt
RUNS="turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=1 turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=18 turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=18,GGML_CUDA_TURBO_FA_GQA=2 turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=18,GGML_CUDA_TURBO_FA_GQA=1"
M=/tmp/l1b.gguf tg_env_rounds bench-l1b-16k.txt 3 16384 2 25 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
