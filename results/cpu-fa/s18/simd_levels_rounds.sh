#!/usr/bin/env bash
# Issue 27, the codec's SIMD levels: SmolLM2-135M-Instruct Q4_1, llama-bench from the patched tree
# (`tqgguf build --tools`), 2 threads, pp2048 and tg32 at depth 4096, -r 1 per run, in interleaved rounds:
# f16/f16, then turbo4/turbo4 and f16/turbo4 with the turbo codec at AVX-512 (this machine's default),
# capped at AVX2 (GGML_TURBO_SIMD_MAX=1) and portable C (GGML_TURBO_NO_SIMD=1). The rest of ggml is the
# same native build in every run; only the turbo decode/encode/dot functions change level.
# Appends to simd-levels-rounds.txt as it goes; ROUNDS (default "1 2") overrides.
#   bash results/cpu-fa/s18/simd_levels_rounds.sh
set -u
cd "$(dirname "$0")"
B=${BIN:-$HOME/.cache/tqgguf/build/tools-cpu/bin}
M=${MODEL:-$HOME/.cache/tqgguf/models/SmolLM2-135M-Instruct.Q4_1.gguf}
O=simd-levels-rounds.txt
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512vl|f16c|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')" >> $O
for r in ${ROUNDS:-1 2}; do
  for run in f16/f16:- turbo4/turbo4:avx512 turbo4/turbo4:avx2 turbo4/turbo4:scalar f16/turbo4:avx512 f16/turbo4:scalar; do
    kv=${run%%:*} lvl=${run#*:}
    case $lvl in avx2) e=GGML_TURBO_SIMD_MAX=1 ;; scalar) e=GGML_TURBO_NO_SIMD=1 ;; *) e=GGML_TURBO_SIMD_MAX=2 ;; esac
    echo "## round $r $kv codec $lvl ($e) $(date -u +%T)" >> $O
    env $e LD_LIBRARY_PATH=$B $B/llama-bench -m $M -t 2 -fa 1 -ctk ${kv%/*} -ctv ${kv#*/} \
      -p 2048 -n 32 -d 4096 -r 1 -o md 2>/dev/null | grep -E "pp2048|tg32" >> $O
  done
done
echo "# done $(date -u +%T)" >> $O
