#!/usr/bin/env bash
# Issue 27's Qwen row at d16384: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (14 Q / 2 KV heads, hd 64, K bias, so
# `--k-center auto` picks `full` for a quantized K and `off` for an f16 K: tqgguf.kcenter.resolve_auto,
# and llama-bench takes the resolved mode as LLAMA_K_CENTER), llama-bench from the patched tree (`tqgguf build --tools`), 2 threads,
# pp2048 and tg32 at depth 16384, -r 1 per run, the K/V pairs one after the other in each round (the VM's
# speed drifts, so pairs are compared within a round). Appends to qwen-d16384-rounds.txt as it goes;
# ROUNDS (default "1 2 3") and PAIRS override.
#   bash results/cpu-fa/s18/qwen_d16384_rounds.sh
set -u
cd "$(dirname "$0")"
B=${BIN:-$HOME/.cache/tqgguf/build/tools-cpu/bin}
M=${MODEL:-$HOME/.cache/tqgguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
O=qwen-d16384-rounds.txt
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); --k-center auto" >> $O
for r in ${ROUNDS:-1 2 3}; do
  for kv in ${PAIRS:-f16/f16 turbo4/turbo4 f16/turbo4}; do
    case ${kv%/*} in f16|bf16|f32) kc=off ;; *) kc=full ;; esac
    echo "## round $r $kv k-center $kc $(date -u +%T)" >> $O
    LLAMA_K_CENTER=$kc LD_LIBRARY_PATH=$B $B/llama-bench -m $M -t 2 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} \
      -p 2048 -n 32 -d 16384 -r 1 -o md 2>/dev/null | grep -E "pp2048|tg32" >> $O
  done
done
echo "# done $(date -u +%T)" >> $O
