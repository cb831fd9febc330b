#!/usr/bin/env bash
# Issue 27, the one-query decode's softmax per block of 16 rows (GGML_TURBO_FA_GROUPED unset) against the
# per-row softmax bit-identical to ggml's loop (GGML_TURBO_FA_GROUPED=exact), one engine: llama-bench, 2 threads,
# -r 1 per run, interleaved rounds of f16/f16, turbo4/turbo4 exact, turbo4/turbo4 block on SmolLM2-135M-Instruct Q4_1
# (tg32 @ d4096 and d8192) and on Qwen2.5-Coder-0.5B Q4_K_M with K centering full (tg32 @ d4096), plus f16/turbo4.
#   BIN=/tmp/b20/bin bash results/cpu-fa/s20/block_softmax_rounds.sh
set -u
cd "$(dirname "$0")"
S=$HOME/.cache/tqgguf/models/SmolLM2-135M-Instruct.Q4_1.gguf
Q=$HOME/.cache/tqgguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
O=${OUTF:-block-softmax-rounds.txt}
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); BIN=$BIN" >> $O
for r in ${ROUNDS:-1 2 3}; do
  for run in ${RUNS:-smollm2:f16/f16:1:4096:off smollm2:turbo4/turbo4:exact:4096:off smollm2:turbo4/turbo4:1:4096:off \
             smollm2:f16/turbo4:exact:4096:off smollm2:f16/turbo4:1:4096:off \
             smollm2:f16/f16:1:8192:off smollm2:turbo4/turbo4:exact:8192:off smollm2:turbo4/turbo4:1:8192:off \
             qwen:f16/f16:1:4096:off qwen:turbo4/turbo4:exact:4096:full qwen:turbo4/turbo4:1:4096:full}; do
    IFS=: read -r m kv mode d kc <<< "$run"
    M=$S; [ $m = qwen ] && M=$Q
    echo "## round $r $m $kv GROUPED=$mode d$d k_center=$kc $(date -u +%T)" >> $O
    GGML_TURBO_FA_GROUPED=$mode LLAMA_K_CENTER=$kc LD_LIBRARY_PATH=$BIN $BIN/llama-bench -m $M -t 2 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} \
      -p 0 -n 32 -d $d -r 1 -o md 2>/dev/null | grep -E "tg32" >> $O
  done
done
echo "# done $(date -u +%T)" >> $O
