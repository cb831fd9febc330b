#!/usr/bin/env python3
"""Markdown tables from scripts/maintain/cpu_fa_bench.sh output (llama-bench jsonl lines).

    python scripts/maintain/cpu_fa_report.py results/cpu-fa/*.jsonl

One row per model, K/V pair and K centering; one column per test (ppN / tgN @ dD) with
t/s before -> after and, in brackets, after / (f16/f16 after) of the same model and test.
Rows are averaged over all lines of a (model, pair, k_center, test, build); load is the
range of 1-minute load averages seen before those runs.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def test_name(r: dict) -> str:
    t = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    return t + (f" @ d{r['n_depth']}" if r.get("n_depth") else "")


def main(paths: list[str]) -> int:
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]
    if not rows:
        print("no results", file=sys.stderr)
        return 1
    ts: dict[tuple, list[float]] = defaultdict(list)
    loads: dict[str, list[float]] = defaultdict(list)
    tests: dict[str, list[str]] = defaultdict(list)
    pairs: dict[str, list[tuple]] = defaultdict(list)
    for r in rows:
        model = Path(r["model_filename"]).name
        pair = (f"{r['type_k']}/{r['type_v']}", r.get("k_center", "off"))
        t = test_name(r)
        ts[(model, pair, t, r["build"])].append(r["avg_ts"])
        loads[model].append(r["load"])
        if t not in tests[model]:
            tests[model].append(t)
        if pair not in pairs[model]:
            pairs[model].append(pair)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    for model, tlist in tests.items():
        print(f"\n### {model} (load {min(loads[model]):.1f}–{max(loads[model]):.1f})\n")
        print("| K/V | K centering | " + " | ".join(tlist) + " |")
        print("|---|---|" + "---:|" * len(tlist))
        for pair in pairs[model]:
            cells = []
            for t in tlist:
                b, a = ts.get((model, pair, t, "before")), ts.get((model, pair, t, "after"))
                base = ts.get((model, ("f16/f16", "off"), t, "after"))
                if not a:
                    cells.append("—")
                    continue
                cell = (f"{mean(b):.1f} → " if b else "") + f"**{mean(a):.1f}**"
                if base:
                    cell += f" ({mean(a) / mean(base):.2f}×)"
                cells.append(cell)
            print(f"| {pair[0]} | {pair[1]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
