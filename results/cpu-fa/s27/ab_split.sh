#!/usr/bin/env bash
# A/B of the split-KV decode below 512 cells (session 27): processes alternating between A (the libraries before the
# change, preloaded from $LIBA) and B (the installed engine); per process the in-process ratio of each pair to f16/f16
# (tg32, interleaved rounds). LIBA=/tmp/libA DEPTHS="0 256" MODELS="smollm2-135m" N=3 bash ab_split.sh
cd "$(dirname "$0")/../../.."
O=results/cpu-fa/s27
for m in ${MODELS:-smollm2-135m}; do
  kc=; [ "${m#qwen}" != "$m" ] && kc=:full
  for d in ${DEPTHS:-0 256}; do
    for i in $(seq 1 ${N:-3}); do
      for ab in A B; do
        pre=; [ $ab = A ] && pre=$LIBA/libggml-base.so.0:$LIBA/libggml-cpu.so.0
        r=$(LD_PRELOAD=$pre python3 scripts/tools/interleaved_bench.py "$m" --case f16/f16 --case turbo4/turbo4$kc \
              --case f16/turbo4 --depth $d --tokens 32 --rounds ${ROUNDS:-6} -t 2 2>/dev/null | grep -E '^\| (f16|turbo)' \
            | awk -F'|' '{printf "%s %s %s;", $2, $4, $5}')
        echo "$m d$d p$i $ab $r" | tee -a $O/ab-split.txt
      done
    done
  done
done
