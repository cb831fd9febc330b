# session 29 call 1 (cold): session 28's prepared call (s28-call1.sh: the vector decode kernels against the tensor-core
# one at 256-2,048 cells alone and in tg64 @ d0 of the 8B shape), then, with the time left, test-backend-ops on CUDA0
# for every turbo case of SET_ROWS, GET_ROWS, CPY and FLASH_ATTN_EXT (the build as it lands: the Hadamard kernel's
# early launch trigger the default since session 28). CALL_LIMIT=N plans for N s.
. scripts/gpu/calls/s28-call1.sh
if [ $(left) -gt 40 ]; then
  timeout $(( $(left) - 10 )) $B/test-backend-ops -b CUDA0 -o SET_ROWS,GET_ROWS,CPY,FLASH_ATTN_EXT -p turbo -j 8 > $OUT/tbo.txt 2>&1; echo "tbo rc $?"
  bash scripts/gpu/tbo_summary.sh $OUT/tbo.txt | tee $OUT/tbo-summary.txt; tail -3 $OUT/tbo.txt
fi
echo "call 1 done at $(( $(date +%s) - T0 )) s"
