#!/usr/bin/env bash
# CPU flash attention before/after: llama-bench of two builds, alternated per K/V pair.
#
#   scripts/maintain/cpu_fa_bench.sh BEFORE_BIN AFTER_BIN MODEL.gguf OUT.jsonl "PAIRS" ARGS...
#
# PAIRS: space-separated K/V pairs (e.g. "f16/f16 f16/turbo4 turbo4/turbo4"); a pair
# suffixed :full runs with LLAMA_K_CENTER=full (the K centering tqgguf's --k-center auto picks
# for a model with a K bias and a quantized K). ARGS go to llama-bench (-p/-n/-d/-r/-t ...).
# Each line of OUT.jsonl is one llama-bench result (-o jsonl) plus "build" (before|after),
# "k_center" and "load" (the 1-minute load average before the run). docs/CPU.md shows how
# the tables were made from it.
set -euo pipefail
before=$1 after=$2 model=$3 out=$4 pairs=$5
shift 5
for pair in $pairs; do
    kc=off
    case $pair in *:full) kc=full; pair=${pair%:full};; esac
    k=${pair%/*} v=${pair#*/}
    for build in before after; do
        bin=$before; [ $build = after ] && bin=$after
        load=$(cut -d' ' -f1 /proc/loadavg)
        LLAMA_K_CENTER=$kc "$bin/llama-bench" -m "$model" -ctk "$k" -ctv "$v" -fa 1 -o jsonl "$@" 2>/dev/null |
            python3 -c "import json,sys
for l in sys.stdin:
    if l.strip():
        r = json.loads(l); r.update(build='$build', k_center='$kc', load=float('$load'))
        print(json.dumps(r))" >> "$out"
        echo "$pair $kc $build done (load $load)" >&2
    done
done
