#!/usr/bin/env bash
# Issue 27, the portable turbo decoders (GGML_TURBO_NO_SIMD=1: what a CPU without the x86 paths runs --
# Arm, RISC-V -- here compiled for x86-64's baseline SSE2, as ggml-base is): FLASH_ATTN_EXT decode on the CPU
# backend (test-backend-ops perf, one query, 8 K/V heads, 2 threads), the engine before and after the change
# alternated in rounds; f16/f16 (ggml's own loop, no turbo code) as the yardstick.
# BEFORE / AFTER: directories of the two engines' tools (test-backend-ops and its libraries).
#   BEFORE=/tmp/before-bin AFTER=~/.cache/tqgguf/build/tools-cpu/bin bash results/cpu-fa/s19/op_ab_portable.sh
set -u
cd "$(dirname "$0")"
O=op-ab-portable-raw.txt
F='hsk=(64|128),hsv=(64|128),nh=8,nr23=\[(8|4),1\],kv=(7680|32768),nb=1,.*type_K=(f16|turbo4|turbo3|turbo2),type_V=(f16|turbo4|turbo3|turbo2),'
echo "# $(date -u +%FT%TZ) $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); GGML_TURBO_NO_SIMD=1" >> $O
for r in ${ROUNDS:-1 2 3}; do
  for e in before after; do
    d=$BEFORE; [ $e = after ] && d=$AFTER
    echo "## round $r $e $(date -u +%T)" >> $O
    GGML_TURBO_NO_SIMD=1 LD_LIBRARY_PATH=$d $d/test-backend-ops perf -b CPU -o FLASH_ATTN_EXT -p "$F" 2>&1 | grep "us/run" \
      | sed -E 's/\x1b\[[0-9;]*m//g; s/.*hsk=([0-9]+).*nr23=\[([0-9]+),1\].*kv=([0-9]+).*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+).* ([0-9.]+) us\/run.*/hd\1 gqa\2 kv\3 \4\/\5 \6/' >> $O
  done
done
echo "# done $(date -u +%T)" >> $O
