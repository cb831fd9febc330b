#!/usr/bin/env python3
"""Issue 27's table from medians.jsonl (medians.sh): per model, depth, test and pair, the ratio to f16/f16 in each
process (the median over its rounds of the per-round ratio, as interleaved_bench prints it), then the median over
the processes; f16/f16's own t/s likewise.

    python3 medians_report.py [medians.jsonl]

A process is a run of lines from round 0 of the first case's first test on (interleaved_bench writes them in
order: rounds, then cases, then tests). Prints a markdown table: cells "median (per-process ratios)".
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def main(path: str) -> None:
    """Print the table for the JSON lines in path."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    procs: list[list[dict]] = []
    first: tuple | None = None
    for r in rows:
        key = (r["model"], r["depth"])
        if r["round"] == 0 and (not procs or (procs[-1][0]["model"], procs[-1][0]["depth"]) != key
                                or (r["case"], r["test"]) == first):
            procs.append([])
            first = (r["case"], r["test"])
        procs[-1].append(r)
    # per process: ratio of each case to the first, per round, then the median over the rounds
    cells: dict[tuple, list[float]] = defaultdict(list)
    for p in procs:
        ref = p[0]["case"]
        by = defaultdict(dict)
        for r in p:
            by[(r["test"], r["case"])][r["round"]] = r["t_s"]
        for (test, case), per_round in by.items():
            base = by[(test, ref)]
            if case == ref:
                cells[(p[0]["model"], p[0]["depth"], test, case)].append(statistics.median(per_round.values()))
            else:
                ratios = [per_round[k] / base[k] for k in per_round if k in base]
                cells[(p[0]["model"], p[0]["depth"], test, case)].append(statistics.median(ratios))
    print("| model | depth | test | pair | median over processes (per process) |")
    print("|---|---|---|---|---|")
    for (model, depth, test, case), vals in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        is_ref = case.startswith("f16/f16")
        fmt = (lambda v: f"{v:.1f} t/s") if is_ref else (lambda v: f"{v:.3f}×")
        print(f"| {model} | {depth} | {test} | {case} | {fmt(statistics.median(vals))} ({', '.join(fmt(v) for v in vals)}) |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "medians.jsonl")
