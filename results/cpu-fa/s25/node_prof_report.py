#!/usr/bin/env python3
"""Per-token time of each kind of graph node, two runs against each other, from the TQPROF lines that a ggml-cpu built
with node_prof.patch prints at exit (TQ_NODE_PROF=1: thread 0's compute time of every node and its wait at the
barrier after it, summed per op:name:type).

    python3 node_prof_report.py A.txt B.txt TOKENS [ROWS]

Per-layer names are merged (blk.N. -> blk., node_N -> node, cache_k_lN -> cache_k); TOKENS divides the sums
(the tokens each run decoded, e.g. 3 rounds x 64 = 192). Prints, largest difference first, µs per token: B less A,
then per run the nodes per token, compute and barrier; last, the totals. Asserts nothing.
"""
from __future__ import annotations

import re
import sys


def load(path: str) -> dict[str, list[float]]:
    """{merged key: [count, compute µs, barrier µs]} from one run's TQPROF lines (the first copy of each key)."""
    out: dict[str, list[float]] = {}
    seen: set[str] = set()
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"TQPROF (.+?)\s+n\s+(\d+) comp\s+([\d.]+) bar\s+([\d.]+) us", line)
        if not m or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        k = re.sub(r"blk\.\d+\.?", "blk.", m.group(1))
        k = re.sub(r"node_\d+", "node", k)
        k = re.sub(r"\(blk\.[a-z_]*", "(blk.W", k)
        k = re.sub(r"cache_([kv])_l\d+\s*(\(v\w*)?", r"cache_\1", k)
        k = re.sub(r"\s+", " ", k)
        x = out.setdefault(k, [0, 0.0, 0.0])
        x[0] += int(m.group(2))
        x[1] += float(m.group(3))
        x[2] += float(m.group(4))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    a, b, t = load(argv[0]), load(argv[1]), float(argv[2])
    rows = int(argv[3]) if len(argv) > 3 else 30
    zero = [0, 0.0, 0.0]
    keys = sorted(set(a) | set(b), key=lambda k: -abs(sum(b.get(k, zero)[1:]) - sum(a.get(k, zero)[1:])))
    for k in keys[:rows]:
        x, y = a.get(k, zero), b.get(k, zero)
        print(f"{(sum(y[1:]) - sum(x[1:])) / t:8.1f} us/tok  {k[:48]:48s} A n/t {x[0] / t:5.1f} c {x[1] / t:7.1f} b {x[2] / t:6.1f}"
              f" | B n/t {y[0] / t:5.1f} c {y[1] / t:7.1f} b {y[2] / t:6.1f}")
    tot = lambda d, i: sum(v[i] for v in d.values()) / t  # noqa: E731
    print(f"total A compute {tot(a, 1):.1f} barrier {tot(a, 2):.1f} | B compute {tot(b, 1):.1f} barrier {tot(b, 2):.1f} us/tok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
