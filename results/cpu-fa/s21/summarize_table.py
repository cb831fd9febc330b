#!/usr/bin/env python3
"""issue-table.jsonl -> the issue's table: per model and pair, the median over rounds of the per-round ratio to
f16/f16 (same process, same round), for each test and depth; the f16/f16 median t/s in the first rows.

    python3 results/cpu-fa/s21/summarize_table.py issue-table.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(x) for x in open(sys.argv[1] if len(sys.argv) > 1 else "issue-table.jsonl")]
t = defaultdict(dict)  # (model, depth, test) -> case -> {round: t/s}
for r in rows:
    t[(r["model"], r["depth"], r["test"])].setdefault(r["case"], {})[r["round"]] = r["t_s"]
cols = [("pp2048", 0), ("pp2048", 4096), ("pp2048", 16384), ("tg32", 0), ("tg32", 4096), ("tg32", 16384)]
print("| model | K / V | " + " | ".join(f"{a} @ d{d}" for a, d in cols) + " |")
print("|---|---|" + "---|" * len(cols))
for model in dict.fromkeys(r["model"] for r in rows):
    cases = list(dict.fromkeys(r["case"] for r in rows if r["model"] == model))
    for case in cases:
        cells = []
        for a, d in cols:
            g = t.get((model, d, a), {})
            if case not in g or "f16/f16:off" not in g:
                cells.append("")
                continue
            ref = g["f16/f16:off"]
            if case == "f16/f16:off":
                cells.append(f"{statistics.median(ref.values()):.1f} t/s")
            else:
                cells.append(f"{statistics.median(g[case][k] / ref[k] for k in g[case] if k in ref):.2f}×")
        print(f"| {model.removesuffix('.gguf')} | {case.replace(':off', '')} | " + " | ".join(cells) + " |")
