#!/usr/bin/env bash
# Issue 27, K centering full's mask fold with fewer passes per layer (the scores' scale on M q instead of on the
# n_kv x n_head terms, no permute copy for one token, the mask cast to F32 once per graph): Qwen2.5-Coder-0.5B Q4_K_M,
# llama-bench, 2 threads, tg32 at d4096 and d8192, -r 1 per run, interleaved rounds of f16/f16 and turbo4/turbo4
# (full) on the engine BEFORE and AFTER (both with the block softmax).
#   BEFORE=/tmp/b20-blk AFTER=/tmp/b20/bin bash results/cpu-fa/s20/fold_passes_rounds.sh
set -u
cd "$(dirname "$0")"
Q=$HOME/.cache/tqgguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
O=${OUTF:-fold-passes-rounds.txt}
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); BEFORE=$BEFORE AFTER=$AFTER" >> $O
for r in ${ROUNDS:-1 2 3}; do
  for d in ${DEPTHS:-4096 8192}; do
    for run in f16/f16:after:off turbo4/turbo4:before:full turbo4/turbo4:after:full; do
      IFS=: read -r kv e kc <<< "$run"
      B=$BEFORE; [ $e = after ] && B=$AFTER
      echo "## round $r qwen $kv GROUPED=$e d$d k_center=$kc $(date -u +%T)" >> $O
      LLAMA_K_CENTER=$kc LD_LIBRARY_PATH=$B $B/llama-bench -m $Q -t 2 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} -p 0 -n 32 -d $d -r 1 -o md 2>/dev/null | grep -E "tg32" >> $O
    done
  done
done
echo "# done $(date -u +%T)" >> $O
