#!/usr/bin/env bash
# Issue 27, the portable turbo decoders in a whole decode: SmolLM2-135M-Instruct Q4_1, llama-bench, 2 threads,
# tg32 at depth 4096, -r 1 per run, interleaved rounds of: f16/f16; turbo4/turbo4 and turbo3/turbo3 with the
# portable codec (GGML_TURBO_NO_SIMD=1) on the engine before and after the change; turbo4/turbo4 with the
# AVX-512 codec (this machine's default) after, as the yardstick. BEFORE / AFTER: the engines' tool directories.
#   BEFORE=/tmp/before-bin AFTER=~/.cache/tqgguf/build/tools-cpu/bin bash results/cpu-fa/s19/portable_tg_rounds.sh
set -u
cd "$(dirname "$0")"
M=${MODEL:-$HOME/.cache/tqgguf/models/SmolLM2-135M-Instruct.Q4_1.gguf}
O=portable-tg-rounds.txt
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" >> $O
for r in ${ROUNDS:-1 2 3}; do
  for run in f16/f16:after:- turbo4/turbo4:before:portable turbo4/turbo4:after:portable turbo3/turbo3:before:portable \
             turbo3/turbo3:after:portable turbo4/turbo4:after:avx512; do
    IFS=: read -r kv e lvl <<< "$run"
    d=$BEFORE; [ $e = after ] && d=$AFTER
    env=X=1; [ $lvl = portable ] && env=GGML_TURBO_NO_SIMD=1
    echo "## round $r $kv $e codec $lvl $(date -u +%T)" >> $O
    env $env LD_LIBRARY_PATH=$d $d/llama-bench -m $M -t 2 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} \
      -p 0 -n 32 -d 4096 -r 1 -o md 2>/dev/null | grep -E "tg32" >> $O
  done
done
echo "# done $(date -u +%T)" >> $O
