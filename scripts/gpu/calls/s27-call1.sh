# session 27 call 1 (cold): what a d0 decode token of the 8B shape pays for a turbo4 cache beyond f16 (the issue's
# d0 mark: 0.91x in session 23), in interleaved tg64 @ d0 rounds of one build:
#   f16; turbo4; turbo4 with the Hadamard kernel triggering its dependents' launch at its start as rope and norm do
#   (GGML_CUDA_FWHT_LC=1; the build's default stays upstream's end-of-grid trigger until this is measured); turbo4
#   without the rotation (LLAMA_ATTN_ROT_DISABLE=1, quality aside: the four transforms' share); turbo4 with the
#   whole GQA group per block at d0 (GGML_CUDA_TURBO_FA_GQA=4); f16 and turbo4 without programmatic dependent
#   launch (GGML_CUDA_PDL=0: how much each leans on it).
# Then the early trigger checked in the model: llama-perplexity on 4 chunks of generated text (the shape's own
# "tN" vocabulary), turbo4, the logits of GGML_CUDA_FWHT_LC=0 as the base, KLD of a second LC=0 run and of LC=1.
# Then, time left, every kernel of about one d0 token under Nsight Compute (turbo4 and f16).
. scripts/gpu/calls/common.sh; call_start 1
export EXTRA_TARGETS=llama-perplexity
cold_start
RUNS="f16/f16: turbo4/turbo4: turbo4/turbo4:GGML_CUDA_FWHT_LC=1 turbo4/turbo4:LLAMA_ATTN_ROT_DISABLE=1 turbo4/turbo4:GGML_CUDA_TURBO_FA_GQA=4 f16/f16:GGML_CUDA_PDL=0 turbo4/turbo4:GGML_CUDA_PDL=0"
tg_env_rounds bench-m8b-d0.txt 3 0 2 150 "$RUNS"
echo "rounds done at $(( $(date +%s) - T0 )) s"
if [ -x $B/llama-perplexity ] && [ $(left) -gt 90 ]; then
  python3 -c "import random; random.seed(27); print(' '.join('t%d' % random.randrange(1000) for _ in range(6000)))" > /tmp/gen.txt
  P="$B/llama-perplexity -m /tmp/m8b.gguf -f /tmp/gen.txt -ngl 99 -fa on -ctk turbo4 -ctv turbo4 -c 512 --chunks 4 -b 512"
  GGML_CUDA_FWHT_LC=0 $P --kl-divergence-base /tmp/base.kld > $OUT/ppl-base.txt 2>&1 || echo "ppl base rc $?"
  for e in GGML_CUDA_FWHT_LC=0 GGML_CUDA_FWHT_LC=1; do
    env $e $P --kl-divergence-base /tmp/base.kld --kl-divergence > $OUT/kld-$e.txt 2>&1 || echo "kld $e rc $?"
    echo "$e: $(grep -E 'Mean +KLD|Maximum KLD|Same top p' $OUT/kld-$e.txt | tr -s ' ' | tr '\n' ';')"
  done
fi
ncu_d0_token 100 90
echo "done at $(( $(date +%s) - T0 )) s"
