#!/usr/bin/env bash
# The per-process spread (results/cpu-fa/s22/process-spread-d4096.md: turbo4/turbo4 `full` tg32 @ d4096 at 0.79x f16 in
# one process, 1.05-1.09x in others; in a process with six turbo4 contexts all six were slow) against address space
# layout randomization: N pairs of processes of Qwen2.5-Coder-0.5B tg32 @ d4096, f16/f16 and turbo4/turbo4 full,
# 3 interleaved rounds each, alternating ASLR as the system has it and off (setarch -R: every process the same
# layout). If the spread is where buffers land relative to each other, the -R processes agree with one another.
# core_probe (compute ns/step, memory GB/s, 2 threads) before and after each process: whether a slow process is a slow
# machine at that time. To aslr-spread-{on,off}.jsonl and aslr-spread.md.
set -u
cd "$(dirname "$0")"
R=$(cd ../../.. && pwd)
P=${TMPDIR:-/tmp}/core_probe; cc -O2 -pthread core_probe.c -o "$P"
echo "# $(date -u +%FT%TZ) $(nproc) cores; randomize_va_space $(cat /proc/sys/kernel/randomize_va_space)" >> aslr-spread.md
for i in $(seq ${N:-4}); do
  for aslr in on off; do
    pre=(); [ $aslr = off ] && pre=(setarch "$(uname -m)" -R)
    echo "aslr=$aslr p$i before: $("$P")" >> aslr-spread.md
    "${pre[@]}" python3 "$R/scripts/tools/interleaved_bench.py" qwen2.5-coder-0.5b --case f16/f16 --case turbo4/turbo4:full \
        --depth 4096 --tokens 32 --rounds 3 -t 2 --out aslr-spread-$aslr.jsonl 2>/dev/null | grep -E '^\| (f16|turbo4)' | sed "s/^/aslr=$aslr p$i /" >> aslr-spread.md
    echo "aslr=$aslr p$i after: $("$P")" >> aslr-spread.md
  done
done
echo "# done $(date -u +%T)" >> aslr-spread.md
