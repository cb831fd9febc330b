# session 19 call 1 (cold): build (+ llama-perplexity) with the system g++; the 8B shape; test-backend-ops
# HADAMARD_SET_ROWS (the Hadamard rotation + turbo cache write, fused by default and unfused with
# GGML_CUDA_TURBO_ROT_FUSE=0) and SET_ROWS; the bytes: llama-perplexity KLD of the fused run against the
# unfused one on the 8B shape (turbo4/turbo4, prefill ubatch 512 and one-token ubatches), with a second
# unfused run as the control; tg64 @ d0 in three interleaved rounds of f16, turbo4 fused, turbo4 unfused
. scripts/gpu/calls/common.sh; call_start 1
EXTRA_TARGETS=llama-perplexity build
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
for f in 1 0; do
  GGML_CUDA_TURBO_ROT_FUSE=$f timeout 150 $B/test-backend-ops -b CUDA0 -o HADAMARD_SET_ROWS > $OUT/tbo-hsr-fuse$f.txt 2>&1 || echo "HADAMARD_SET_ROWS fuse=$f rc $?"
  echo "HADAMARD_SET_ROWS fuse=$f: $(grep -c ' OK' $OUT/tbo-hsr-fuse$f.txt) OK, $(grep -c 'FAIL' $OUT/tbo-hsr-fuse$f.txt) FAIL, $(grep -c 'not supported' $OUT/tbo-hsr-fuse$f.txt) not supported"
  grep -E "FAIL" $OUT/tbo-hsr-fuse$f.txt | head -5
done | tee $OUT/check-summary.txt
timeout 120 $B/test-backend-ops -b CUDA0 -o SET_ROWS -p turbo > $OUT/tbo-set-rows.txt 2>&1 || echo "SET_ROWS rc $?"
echo "SET_ROWS turbo: $(grep -c ' OK' $OUT/tbo-set-rows.txt) OK, $(grep -c FAIL $OUT/tbo-set-rows.txt) FAIL" | tee -a $OUT/check-summary.txt
wait; tail -1 $OUT/model.log
echo "left $(left) s"
P="$B/llama-perplexity -m /tmp/m8b.gguf -c 128 --chunks 4 -b 128 -ngl 99 -fa on -ctk turbo4 -ctv turbo4"
for ub in 512 1; do
  GGML_CUDA_TURBO_ROT_FUSE=0 timeout 60 $P -ub $ub -f .device/wiki.raw --kl-divergence-base /tmp/base-$ub.kld > $OUT/ppl-ub$ub-base.txt 2>&1 || echo "base ub $ub rc $?"
  for run in fused:1 unfused-again:0; do
    GGML_CUDA_TURBO_ROT_FUSE=${run#*:} timeout 60 $P -ub $ub --kl-divergence-base /tmp/base-$ub.kld --kl-divergence > $OUT/ppl-ub$ub-${run%:*}.txt 2>&1 || echo "${run%:*} ub $ub rc $?"
    echo "ub $ub ${run%:*} vs unfused: $(grep -E 'Mean +KLD|Maximum KLD|Same top p' $OUT/ppl-ub$ub-${run%:*}.txt | tr -s ' ' | tr '\n' ';')"
  done
done | tee $OUT/kld-fused-vs-unfused.txt
echo "left $(left) s"
lb() { local e=$1; shift; env "$e" $B/llama-bench -m /tmp/m8b.gguf "$@" -ngl 99 -fa 1 -r 2 -o md 2>>$OUT/bench.err | grep -E '^\| ' | grep -v -E '^\| (model|---)'; }
for r in 1 2 3; do
  for run in f16/f16:X=1 turbo4/turbo4:GGML_CUDA_TURBO_ROT_FUSE=1 turbo4/turbo4:GGML_CUDA_TURBO_ROT_FUSE=0; do kv=${run%%:*} e=${run#*:}
    echo "r$r == $kv $e"
    lb $e -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 64
  done
  [ $(left) -lt 40 ] && { echo "stopping: $(left) s left"; break; }
done | tee $OUT/bench-m8b-d0-rounds.txt
echo "done at $(( $(date +%s) - T0 )) s"
