#!/usr/bin/env python3
"""Print the foundation PPL table (docs/RESULTS.md) from sweep results (results.jsonl) and/or
llama-perplexity grid TSVs (scripts/gpu/kld_grid.sh).

    python scripts/maintain/ppl_table_report.py NAME=results/sweep-smollm2/results.jsonl NAME=GRID.tsv:F16_PPL ...
"""
from __future__ import annotations

import csv
import json
import sys

ORDER = [("f16", "f16", "n/a"), ("q8_0", "q8_0", "on"), ("q4_0", "q4_0", "on"), ("q8_0", "turbo4", "on"),
         ("q8_0", "turbo3", "on"), ("turbo4", "turbo4", "on"), ("turbo3", "turbo3", "on"), ("turbo4", "turbo4", "off"),
         ("q4_0", "q4_0", "off")]
BITS = {"f16": 16.0, "q8_0": 8.5, "q4_0": 4.5, "turbo4": 4.25, "turbo3": 3.25}


def load(spec: str) -> tuple[str, dict]:
    name, path = spec.split("=", 1)
    rows = {}
    if path.endswith(".jsonl"):
        for line in open(path):
            r = json.loads(line)
            rows[(r["ctk"], r["ctv"], r["rot"])] = (r["ppl"], r["ppl_err"], r["kld_mean"], r["same_top_p"])
        return name + " (tqgguf sweep, 2-core Xeon)", rows
    path, f16 = path.rsplit(":", 1)
    rows[("f16", "f16", "n/a")] = (float(f16), float("nan"), 0.0, 100.0)
    for r in csv.DictReader(open(path), delimiter="\t"):
        rows[(r["ctk"], r["ctv"], r["rot"])] = (float(r["ppl"]), float(r["ppl_err"]), float(r["kld"]), float(r["same_top_p"]))
    return name + " (llama-perplexity, 16-core Xeon)", rows


def main() -> int:
    print("| model | K | V | rotation | bits/value (K+V)/2 | PPL | ΔPPL vs f16 | mean KLD | Same top p % |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in sys.argv[1:]:
        name, rows = load(spec)
        f16 = rows[("f16", "f16", "n/a")][0]
        for key in ORDER:
            if key not in rows:
                continue
            ppl, err, kld, top = rows[key]
            err_s = f" ± {err:.4f}" if err == err else ""
            print(f"| {name} | {key[0]} | {key[1]} | {key[2]} | {(BITS[key[0]] + BITS[key[1]]) / 2:.3g} | "
                  f"{ppl:.4f}{err_s} | {100 * (ppl / f16 - 1):+.2f}% | {kld:.5f} | {top:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
