#!/usr/bin/env bash
# Issue 27, session 21: quality of K centering full's decode fold, the two ops (AFTER) against the session-20
# graph (BEFORE) and against adding R(pos)·b back to K (LLAMA_K_CENTER_FOLD=0): llama-perplexity with ubatches of
# 4 tokens (the fold runs for ubatches of <= 4), KLD against f16/f16 run the same way, Qwen2.5-Coder-0.5B Q4_K_M.
#   BEFORE=/tmp/fold_before AFTER=/tmp/fold_after2 CHUNKS=12 bash results/cpu-fa/s21/fold_op_kld.sh
set -u
cd "$(dirname "$0")"
Q=$HOME/.cache/tqgguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
W=${TEXT:-$(cd ../../../.. && pwd)/shared/data/wiki.test.raw}
N=${CHUNKS:-12}
O=fold-op-kld-c$N.txt
B=/tmp/qwen_f16_base_c$N.kld
A="-m $Q -f $W -c 512 -b 512 -ub 4 --chunks $N -fa on -t 2"
echo "# $(date -u +%FT%TZ) llama-perplexity $A; turbo4/turbo4 LLAMA_K_CENTER=full; BEFORE=$BEFORE AFTER=$AFTER" > $O
LD_LIBRARY_PATH=$AFTER $AFTER/llama-perplexity $A -ctk f16 -ctv f16 --kl-divergence-base $B > /dev/null 2>&1
for run in before:1 after:1 after:0; do
  IFS=: read -r b fold <<< "$run"
  BIN=$BEFORE; [ $b = after ] && BIN=$AFTER
  echo "== $b LLAMA_K_CENTER_FOLD=$fold" >> $O
  LLAMA_K_CENTER=full LLAMA_K_CENTER_FOLD=$fold LD_LIBRARY_PATH=$BIN $BIN/llama-perplexity $A -ctk turbo4 -ctv turbo4 \
    --kl-divergence-base $B --kl-divergence 2>&1 | grep -E "Mean PPL\(Q\) |Mean    KLD|Median  KLD|99.0%   KLD|Same top p" >> $O
done
rm -f $B
