#!/usr/bin/env bash
# FA alone on the CPU backend, one query, SmolLM2-135M's heads (hd 64, 9 Q / 3 K/V), 32 and 256 cells (below the
# split), turbo4/turbo4, in alternating processes of one dev-tree build: GGML_TURBO_FA_GROUPED=0 (ggml's per-head loop),
# exact (the grouped path, ggml's per-row softmax), 1 (the default: grouped, block softmax); µs per call.
#   B=/path/to/dev/build R=6 bash results/cpu-fa/s28/fa_alone.sh > results/cpu-fa/s28/fa-alone.txt
for r in $(seq 1 ${R:-6}); do for mode in 0 exact 1; do
  echo "r$r GROUPED=$mode $(GGML_TURBO_FA_GROUPED=$mode $B/bin/test-backend-ops perf -b CPU -o FLASH_ATTN_EXT \
      -p 'hsk=64,hsv=64,nh=3,nr23=\[3,1\],kv=(32|256),nb=1,.*type_K=turbo4' 2>&1 | grep -E 'us/run' \
      | sed -E 's/.*(kv=[0-9]+).* ([0-9.]+) us\/run.*/\1 \2/' | tr '\n' ' ')"
done; done
