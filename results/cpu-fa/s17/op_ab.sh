#!/usr/bin/env bash
# FLASH_ATTN_EXT decode on the CPU backend (test-backend-ops perf, one query), engines alternated
T=~/.cache/tqgguf/build/tools-cpu/bin/test-backend-ops
F='hsk=(64|128),hsv=(64|128),nh=8,nr23=\[(8|4),1\],kv=(7680|32768),nb=1,.*type_K=(f16|turbo4|q8_0),type_V=(f16|turbo4),'
echo "# $(date -u +%FT%TZ) $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for r in 1 2 3 4 5; do
  for e in before fused; do
    echo "## round $r $e $(date -u +%T)"
    LD_LIBRARY_PATH=/tmp/bins/$e $T perf -b CPU -o FLASH_ATTN_EXT -p "$F" 2>&1 | grep "us/run" | sed -E 's/\x1b\[[0-9;]*m//g; s/.*hsk=([0-9]+).*kv=([0-9]+).*type_K=([a-z0-9_]+),type_V=([a-z0-9_]+).* ([0-9.]+) us\/run.*/hd\1 kv\2 \3\/\4 \5/'
  done
done
echo "# done $(date -u +%T)"
