#!/usr/bin/env bash
# A/B at depth $DEPTH (default 0; session 27): processes alternating between A (the libraries before this session's decode change, preloaded
# from $LIBA) and B (the installed engine), SmolLM2-135M and Qwen2.5-Coder-0.5B (full for Qwen's turbo K), tg64, three
# interleaved rounds per process; one JSON line per round and case into ab-dDEPTH-A.jsonl / ab-dDEPTH-B.jsonl.
#   LIBA=/tmp/libA N=4 bash results/cpu-fa/s27/ab_d0.sh; python3 results/cpu-fa/s23/medians_report.py ab-d0-A.jsonl
cd "$(dirname "$0")/../../.."
O=${O:-results/cpu-fa/s27}  # O=results/cpu-fa/s28: session 28's runs
for i in $(seq 1 ${N:-4}); do
  for m in ${MODELS:-smollm2-135m qwen2.5-coder-0.5b}; do
    kc=; [ "${m#qwen}" != "$m" ] && kc=:full
    for ab in A B; do
      pre=; [ $ab = A ] && pre=$LIBA/libggml-base.so.0:$LIBA/libggml-cpu.so.0
      LD_PRELOAD=$pre python3 scripts/tools/interleaved_bench.py "$m" --case f16/f16 --case turbo4/turbo4$kc --case f16/turbo4 \
          --depth ${DEPTH:-0} --tokens 64 --rounds 3 -t 2 --out "$O/ab-d${DEPTH:-0}-$ab.jsonl" 2>/dev/null | grep -E '^\| (f16|turbo)' \
        | awk -F'|' -v h="$m p$i $ab" '{printf "%s %s %s;", h, $2, $5} END {print ""}' | tee -a $O/ab-d${DEPTH:-0}.txt
    done
  done
done
