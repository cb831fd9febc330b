#!/usr/bin/env python3
"""Per-token GPU time of each kernel of a decode step, from scripts/gpu/ncu_step_summary.py's output.

    python3 scripts/gpu/ncu_per_token.py ncu-step64k-summary.txt [N_LAYERS]

A window of launches (ncu --launch-skip/--launch-count) cuts tokens at arbitrary points; the flash-attention
launches (one per layer) say how many tokens it holds: each kernel's summed µs times N_LAYERS (default 32) over
the window's FA launches is its time per token. Prints per file: µs per token and per call for each kernel, and
the total. Raises SystemExit when a file's block has no flash-attention kernel.
"""
from __future__ import annotations

import re
import sys


def main(argv: list[str]) -> int:
    path, n_layers = argv[0], int(argv[1]) if len(argv) > 1 else 32
    blocks: dict[str, list[tuple[str, int, float]]] = {}
    name = None
    for line in open(path, encoding="utf-8"):
        m = re.match(r"== (\S+):", line)
        if m:
            name = m.group(1)
            blocks[name] = []
            continue
        m = re.match(r"\s+(\S.*?)\s+n\s+(\d+)\s+sum\s+([\d.]+) us", line)
        if m and name:
            blocks[name].append((m.group(1), int(m.group(2)), float(m.group(3))))
    for name, rows in blocks.items():
        n_fa = sum(n for k, n, _ in rows if k.startswith("flash_attn_ext") and "combine" not in k)
        if n_fa == 0:
            raise SystemExit(f"{name}: no flash-attention launches to count tokens by")
        f = n_layers / n_fa
        print(f"== {name}: {n_fa} FA launches = {n_fa / n_layers:.2f} tokens; µs per token, µs per call")
        for k, n, us in rows:
            print(f"  {k[:70]:70s} {us * f:9.1f} {us / n:8.2f}")
        print(f"  {'total':70s} {sum(us for _, _, us in rows) * f:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
