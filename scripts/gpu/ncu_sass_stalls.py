#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS instruction, from Nsight Compute's source page.

    ncu --section SourceCounters ... -o REP <program>
    ncu --import REP.ncu-rep --page source --csv --print-source sass > SASS.csv
    python3 scripts/gpu/ncu_sass_stalls.py SASS.csv[.gz] [--top N]

Prints the stall samples (PC sampling: "Warp Stall Sampling (All Samples)" and the per-reason
`stall_*` columns) summed over the whole kernel, over the kernel's largest loop (the longest
backward branch, found from the addresses), and before/after it; then the N instructions with the
most samples, with their reasons. A sample is one warp seen at one instruction; "selected" means
it issued, every other reason is a cycle it waited (Nsight Compute's warp-state definitions).
"""
from __future__ import annotations

import argparse
import csv
import gzip
import re
from collections import Counter


def read(path: str) -> list[dict[str, str]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    names = rows[head]
    return [dict(zip(names, r)) for r in rows[head + 1:] if len(r) == len(names)]


def num(v: str) -> int:
    try:
        return int(v.replace(",", ""))
    except ValueError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    rows = read(a.csv)
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    addr = [int(r["Address"], 16) for r in rows]
    # the longest backward branch: the main loop
    loop = None
    for i, r in enumerate(rows):
        m = re.search(r"BRA\S*\s+.*?(0x[0-9a-f]+)", r["Source"])
        if m:
            tgt = int(m.group(1), 16)
            base = addr[0]
            tgt_abs = tgt if tgt >= base else base + tgt
            if tgt_abs < addr[i] and (loop is None or addr[i] - tgt_abs > loop[1] - loop[0]):
                loop = (tgt_abs, addr[i])
    parts = {"before loop": Counter(), "loop": Counter(), "after loop": Counter()}
    total = Counter()
    for r, ad in zip(rows, addr):
        where = "loop" if loop and loop[0] <= ad <= loop[1] else ("before loop" if loop and ad < loop[0] else "after loop")
        for k in reasons:
            parts[where][k] += num(r[k])
            total[k] += num(r[k])
    n = sum(total.values()) or 1
    print(f"{len(rows)} instructions; loop {hex(loop[0]) if loop else '-'}..{hex(loop[1]) if loop else '-'}; samples {n}")
    for name, c in [("kernel", total)] + list(parts.items()):
        s = sum(c.values())
        top = ", ".join(f"{k[6:]} {100 * v / s:.0f}%" for k, v in c.most_common(8) if v) if s else ""
        print(f"  {name:12s} {100 * s / n:5.1f}% of samples: {top}")
    print(f"\ntop {a.top} instructions by samples:")
    for r in sorted(rows, key=lambda r: -num(r["Warp Stall Sampling (All Samples)"]))[: a.top]:
        s = num(r["Warp Stall Sampling (All Samples)"])
        why = ", ".join(f"{k[6:]} {num(r[k])}" for k in sorted(reasons, key=lambda k: -num(r[k]))[:3] if num(r[k]))
        print(f"  {r['Address'][-5:]} {100 * s / n:5.2f}%  {r['Source'].strip()[:60]:60s} {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
