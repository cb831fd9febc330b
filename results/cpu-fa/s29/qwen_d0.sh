#!/usr/bin/env bash
# Session 29: the one unmet cell of issue 27 (Qwen2.5-Coder-0.5B turbo4/turbo4 with --k-center full, tg64 @ d0) in
# N processes of interleaved_bench (three interleaved rounds each of f16/f16, turbo4/turbo4:full, f16/turbo4), the
# installed engine; one JSON line per round and case into $O/qwen-d0.jsonl, one summary line per process into
# $O/qwen-d0.txt. Report: python3 results/cpu-fa/s23/medians_report.py $O/qwen-d0.jsonl
#   N=10 bash results/cpu-fa/s29/qwen_d0.sh;  MODEL=smollm2-135m TAG=smollm2 KC= N=6 bash ... with KC= (SmolLM2 has no K bias: no centering)
cd "$(dirname "$0")/../../.."
O=${O:-results/cpu-fa/s29}
for i in $(seq 1 ${N:-10}); do
  python3 scripts/tools/interleaved_bench.py ${MODEL:-qwen2.5-coder-0.5b} --case f16/f16 --case turbo4/turbo4${KC-:full} --case f16/turbo4 \
      --depth ${DEPTH:-0} --tokens 64 --rounds 3 -t 2 --out "$O/${TAG:-qwen}-d${DEPTH:-0}.jsonl" 2>/dev/null | grep -E '^\| (f16|turbo)' \
    | awk -F'|' -v h="p$i" '{printf "%s %s %s;", h, $2, $5} END {print ""}' | tee -a "$O/${TAG:-qwen}-d${DEPTH:-0}.txt"
done
