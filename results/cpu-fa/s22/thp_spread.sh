#!/usr/bin/env bash
# The per-process spread (process-spread-d4096.md) against transparent huge pages for the engine's buffers: N processes
# of Qwen2.5-Coder-0.5B tg32 @ d4096, f16/f16 and turbo4/turbo4 full, 3 interleaved rounds each, with glibc's malloc
# as it is (this VM: THP "madvise", so 4 KiB pages) and with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc madvises
# its mmap'd chunks: 2 MiB pages where THP allows), alternating; AnonHugePages sampled mid-run. To thp-spread.jsonl/.md
set -u
cd "$(dirname "$0")"
R=$(cd ../../.. && pwd)
echo "# $(date -u +%FT%TZ) $(nproc) cores; THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)" >> thp-spread.md
for i in $(seq ${N:-3}); do
  for thp in 0 1; do
    tun=; [ $thp = 1 ] && tun=glibc.malloc.hugetlb=1
    ( sleep 40; echo "process $i thp=$thp: $(grep AnonHugePages /proc/meminfo)" >> thp-spread.md ) &
    GLIBC_TUNABLES=$tun python3 "$R/scripts/tools/interleaved_bench.py" qwen2.5-coder-0.5b --case f16/f16 --case turbo4/turbo4:full \
        --depth 4096 --tokens 32 --rounds 3 -t 2 --out thp-spread-$thp.jsonl 2>/dev/null | grep -E '^\| (f16|turbo4)' | sed "s/^/thp=$thp p$i /" >> thp-spread.md
    wait
  done
done
echo "# done $(date -u +%T)" >> thp-spread.md
