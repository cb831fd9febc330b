#!/usr/bin/env bash
# Issue 27, session 21: K centering `full`'s decode fold as one CPU op (llama_k_center_fold_mask) against the
# session-20 graph (mul_mat over head_dim, scale, permuting copy, mask cast and add), two builds of the same dev
# tree: llama-bench, 2 threads, -r 1 per run, interleaved rounds, Qwen2.5-Coder-0.5B Q4_K_M, tg32.
#   BEFORE=/tmp/fold_before AFTER=/tmp/fold_after bash results/cpu-fa/s21/fold_op_rounds.sh
set -u
cd "$(dirname "$0")"
Q=$HOME/.cache/tqgguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
O=${OUTF:-fold-op-rounds.txt}
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); BEFORE=$BEFORE AFTER=$AFTER" >> $O
for r in ${ROUNDS:-1 2 3}; do
  for d in ${DEPTHS:-4096}; do
    for run in ${RUNS:-before:f16/f16:off before:turbo4/turbo4:full after:turbo4/turbo4:full after:f16/f16:off}; do
      IFS=: read -r b kv kc <<< "$run"
      BIN=$BEFORE; [ $b = after ] && BIN=$AFTER
      echo "## round $r $b $kv k_center=$kc d$d $(date -u +%T)" >> $O
      LLAMA_K_CENTER=$kc LD_LIBRARY_PATH=$BIN $BIN/llama-bench -m $Q -t 2 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} \
        -p 0 -n 32 -d $d -r 1 -o md 2>/dev/null | grep -E "tg32" >> $O
    done
  done
done
echo "# done $(date -u +%T)" >> $O
