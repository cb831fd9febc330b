#!/usr/bin/env python3
"""Per-kernel GPU time of a decode step, from Nsight Compute's text output.

    python3 scripts/gpu/ncu_step_summary.py ncu-step-q8_0.txt [ncu-step-turbo4.txt ...]

Input: the stdout of ``ncu --metrics gpu__time_duration.sum ...`` (scripts/gpu/cuda.sh
step writes one file per K/V type). Each kernel launch is a header line ``  NAME(ARGS)
(grid)x(block), Context ...`` followed by its ``gpu__time_duration.sum UNIT VALUE`` line.
Output: per file, the total and, per kernel (template arguments kept, argument list cut),
the number of launches, the summed and the mean duration in microseconds, largest first.
"""
from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict

_HEADER = re.compile(r"^  (\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")
_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def summarize(path: str) -> tuple[dict[str, float], Counter]:
    """Summed duration (µs) and launch count per kernel name in one ncu text file.

    Raises ValueError for a duration unit other than ns/us/ms."""
    total: dict[str, float] = defaultdict(float)
    count: Counter = Counter()
    name = None
    with open(path, errors="replace") as f:
        for line in f:
            m = _HEADER.match(line)
            if m:
                name = re.sub(r"^void ", "", re.sub(r"\(.*", "", m.group(1)))
                continue
            if "gpu__time_duration.sum" in line and name is not None:
                *_, unit, value = line.split()
                if unit not in _TO_US:
                    raise ValueError(f"{path}: unknown duration unit {unit!r}")
                total[name] += float(value.replace(",", "")) * _TO_US[unit]
                count[name] += 1
    return total, count


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in paths:
        total, count = summarize(path)
        print(f"== {path}: {sum(total.values()):.1f} us over {sum(count.values())} kernels")
        for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
            print(f"  {name[:72]:72s} n {count[name]:4d}  sum {us:8.1f} us  mean {us / count[name]:6.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
