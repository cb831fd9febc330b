# session 19 call 1 (cold): build (+ llama-perplexity) with the system g++; the 8B shape; test-backend-ops
# HADAMARD_SET_ROWS (the Hadamard rotation + turbo cache write, fused by default and unfused with
# GGML_CUDA_TURBO_ROT_FUSE=0) and SET_ROWS; tg64 @ d0 in three interleaved rounds of f16, turbo4 fused, turbo4 unfused
. scripts/gpu/calls/common.sh; call_start 1
EXTRA_TARGETS=llama-perplexity build
bash scripts/gpu/roofline.sh model /tmp/m8b.gguf > $OUT/model.log 2>&1 &
for f in 1 0; do
  GGML_CUDA_TURBO_ROT_FUSE=$f timeout 150 $B/test-backend-ops -b CUDA0 -o HADAMARD_SET_ROWS > $OUT/tbo-hsr-fuse$f.txt 2>&1 || echo "HADAMARD_SET_ROWS fuse=$f rc $?"
  echo "HADAMARD_SET_ROWS fuse=$f: $(sed 's/\x1b\[[0-9;]*m//g' $OUT/tbo-hsr-fuse$f.txt | grep -c ': OK') OK, $(grep -c 'FAIL' $OUT/tbo-hsr-fuse$f.txt) FAIL, $(grep -c 'not supported' $OUT/tbo-hsr-fuse$f.txt) not supported"
  grep -E "FAIL" $OUT/tbo-hsr-fuse$f.txt | head -5
done | tee $OUT/check-summary.txt
timeout 120 $B/test-backend-ops -b CUDA0 -o SET_ROWS -p turbo > $OUT/tbo-set-rows.txt 2>&1 || echo "SET_ROWS rc $?"
echo "SET_ROWS turbo: $(sed 's/\x1b\[[0-9;]*m//g' $OUT/tbo-set-rows.txt | grep -c ': OK') OK, $(grep -c FAIL $OUT/tbo-set-rows.txt) FAIL" | tee -a $OUT/check-summary.txt
wait; tail -1 $OUT/model.log
echo "left $(left) s"
# (the KLD step of s19-call2.sh ran here too, on 400 KB of text: llama-perplexity timed out tokenizing it)
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
