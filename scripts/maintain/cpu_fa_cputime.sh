#!/usr/bin/env bash
#   cd DIR_WITH_before-bin_AND_after-bin && cpu_fa_cputime.sh MODEL.gguf f16/f16 turbo4/turbo4 ...
# CPU seconds (user+sys) of one llama-bench run (pp512 @ d1024) per K/V pair and build, 1 thread:
# the work done, which a shared machine's load does not stretch as it stretches wall time.
# CPU_FA_ARGS replaces the test (default "-p 512 -n 0 -d 1024"), e.g. CPU_FA_ARGS="-p 512 -n 0 -d 4096".
M=$1; shift
for pair in "$@"; do
  k=${pair%/*}; v=${pair#*/}
  for b in before after; do
    l=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -o /tmp/cpu_fa_time.$$ -f "%U %S" $b-bin/llama-bench -m $M -ctk $k -ctv $v -fa 1 ${CPU_FA_ARGS:--p 512 -n 0 -d 1024} -r 1 -t 1 -o csv > /tmp/cpu_fa_out.$$ 2>/dev/null
    echo "$pair $b cpu_s=$(awk '{print $1+$2}' /tmp/cpu_fa_time.$$) wall_t/s=$(tail -1 /tmp/cpu_fa_out.$$ | awk -F, '{print $(NF-1)}') load=$l"
  done
done
