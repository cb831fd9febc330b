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
gen_text
if [ -x $B/llama-perplexity ]; then
  kld_ab l1b-q8t4 /tmp/l1b.gguf q8_0/turbo4 0 18
  kld_ab m8b-t3 /tmp/m8b.gguf turbo3/turbo3 6 19
  kld_ab m8b-t2 /tmp/m8b.gguf turbo2/turbo2 6 20
fi | tee $OUT/kld-summary.txt
RUNS="turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=1 turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=18 turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=18,GGML_CUDA_TURBO_FA_GQA=2 turbo4/turbo4:GGML_CUDA_TURBO_FA_DEC=18,GGML_CUDA_TURBO_FA_GQA=1"
M=/tmp/l1b.gguf tg_env_rounds bench-l1b-16k.txt 3 16384 2 25 "$RUNS"
echo "done at $(( $(date +%s) - T0 )) s"
