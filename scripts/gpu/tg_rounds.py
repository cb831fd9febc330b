"""Mean tg128 t/s per run label and depth over the rounds of `scripts/gpu/cuda.sh tg` output.

    python3 scripts/gpu/tg_rounds.py results/cuda/s9/final/tg-interleaved-3rounds.txt

Input: the `tg` step's lines ("== K/V[ VAR=VALUE...]" then llama-bench markdown rows), with
any prefix before "==" (a round tag) ignored; a label may occur several times (rounds run
the same list again, interleaved, so that slow drift of the card's speed falls on every
label alike). Output: one row per label, mean t/s per depth, the per-round values, and the
ratio to the first label's mean (the baseline, e.g. q8_0/q8_0).
"""
from __future__ import annotations

import re
import sys
from collections import defaultdict


def parse(path: str) -> dict[str, dict[str, list[float]]]:
    """{label: {test name (e.g. "tg128 @ d8192"): [t/s per round]}} in first-seen label order."""
    runs: dict[str, dict[str, list[float]]] = {}
    label = None
    for line in open(path, encoding="utf-8"):
        m = re.search(r"== (\S.*)$", line)
        if m:
            label = m.group(1).strip()
            runs.setdefault(label, defaultdict(list))
            continue
        cells = [c.strip() for c in line.split("|")]
        if label is None or len(cells) < 4 or not cells[-3].startswith(("tg", "pp")):
            continue
        runs[label][cells[-3]].append(float(cells[-2].split("±")[0]))
    return runs


def main(paths: list[str]) -> None:
    """Print the table for each file in paths."""
    for path in paths:
        runs = parse(path)
        tests = list(dict.fromkeys(t for r in runs.values() for t in r))
        base = next(iter(runs.values()), {})
        print(f"{path}\n| run | " + " | ".join(tests) + " |\n|---|" + "---|" * len(tests))
        for label, r in runs.items():
            cells = []
            for t in tests:
                v = r.get(t, [])
                if not v:
                    cells.append("")
                    continue
                mean = sum(v) / len(v)
                b = base.get(t, [])
                ratio = f" ({mean / (sum(b) / len(b)):.3f}x)" if b and r is not base else ""
                cells.append(f"{mean:.1f}{ratio} [" + ", ".join(f"{x:.0f}" for x in v) + "]")
            print(f"| {label} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
