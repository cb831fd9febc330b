# session 19 call 2 (cold): build again (+ llama-perplexity); is the fused rotation + turbo cache write taken, and
# what does each kernel of a decode step cost with it and without (Nsight Compute, a 2-layer 8B shape with a
# 512-token vocabulary, turbo4/turbo4, per kernel); the bytes: llama-perplexity KLD of the fused run against the
# unfused one on the 8B shape (prefill ubatch 512, and one-token ubatches), a second unfused run as the control
. scripts/gpu/calls/common.sh; call_start 2
EXTRA_TARGETS=llama-perplexity build
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
mkdir -p /tmp/tq-site; python3 -m pip install -q --no-index --no-deps --target /tmp/tq-site .device/whl/gguf-*.whl 2>/dev/null
PYTHONPATH=/tmp/tq-site:$PWD python3 scripts/gpu/write_shape.py llama-3.1-8b /tmp/m2l.gguf --layers 2 --vocab 512 | tail -1
for f in 1 0; do
  GGML_CUDA_TURBO_ROT_FUSE=$f timeout 90 ncu --clock-control none --cache-control none --launch-skip 300 --launch-count 120 --metrics gpu__time_duration.sum \
    $B/llama-bench -m /tmp/m2l.gguf -ngl 99 -fa 1 -ctk turbo4 -ctv turbo4 -p 0 -n 16 -r 1 > $OUT/ncu-m2l-fuse$f.txt 2>&1 || echo "ncu fuse=$f rc $?"
done
python3 scripts/gpu/ncu_step_summary.py $OUT/ncu-m2l-fuse1.txt $OUT/ncu-m2l-fuse0.txt | tee $OUT/ncu-m2l-summary.txt | head -50
wait; tail -1 $OUT/model.log
echo "left $(left) s"
P="$B/llama-perplexity -m /tmp/m8b.gguf -c 128 --chunks 2 -b 128 -ngl 99 -fa on -ctk turbo4 -ctv turbo4"
for ub in 512 1; do
  GGML_CUDA_TURBO_ROT_FUSE=0 timeout 60 $P -ub $ub -f .device/wiki3k.raw --kl-divergence-base /tmp/base-$ub.kld > $OUT/ppl-ub$ub-base.txt 2>&1 || echo "base ub $ub rc $?"
  for run in fused:1 unfused-again:0; do
    GGML_CUDA_TURBO_ROT_FUSE=${run#*:} timeout 60 $P -ub $ub --kl-divergence-base /tmp/base-$ub.kld --kl-divergence > $OUT/ppl-ub$ub-${run%:*}.txt 2>&1 || echo "${run%:*} ub $ub rc $?"
    echo "ub $ub ${run%:*} vs unfused: $(grep -E 'Mean +KLD|Maximum KLD|Same top p' $OUT/ppl-ub$ub-${run%:*}.txt | tr -s ' ' | tr '\n' ';')"
  done
done | tee $OUT/kld-fused-vs-unfused.txt
echo "done at $(( $(date +%s) - T0 )) s"
