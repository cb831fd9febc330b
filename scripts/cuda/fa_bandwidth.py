#!/usr/bin/env python3
"""FLASH_ATTN_EXT decode micro-benchmark table from `test-backend-ops perf` output.

    python3 scripts/cuda/fa_bandwidth.py FA_PERF.txt COPY_BANDWIDTH.txt

Reads the perf lines of test-backend-ops (one per case: its parameters, `us/run`,
`kB/run`, `GB/s`) and prints one Markdown row per case: head dim, KV heads, GQA ratio, KV
length, queries, K/V types, time per call (µs), the bytes the op touches per call (MB;
test-backend-ops' own count, all tensors: K and V are > 99% of it for one query), the
effective bandwidth (GB/s) and that bandwidth as a share of the card's copy bandwidth
measured in the same run (scripts/cuda/copy_bandwidth.cu).
"""
from __future__ import annotations

import re
import sys

CASE = re.compile(r"FLASH_ATTN_EXT\((?P<args>[^)]*)\):.*?(?P<us>[\d.]+) us/run - +(?P<kb>\d+) kB/run - .*?(?P<gbs>[\d.]+) GB/s")


def fields(args: str) -> dict[str, str]:
    """Parse `k=v,k=[a,b],...` into a dict (list values kept as their text)."""
    out, depth, key, cur = {}, 0, None, ""
    for ch in args + ",":
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "=" and depth == 0 and key is None:
            key, cur = cur, ""
        elif ch == "," and depth == 0:
            if key is not None:
                out[key] = cur
            key, cur = None, ""
        else:
            cur += ch
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    text = open(sys.argv[1], errors="replace").read()
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    copy = re.search(r"copy bandwidth: ([\d.]+) GB/s", open(sys.argv[2]).read())
    copy_gbs = float(copy.group(1)) if copy else None
    print(f"copy bandwidth (read + write): {copy_gbs} GB/s\n")
    print("| head dim | KV heads | GQA | KV | queries | K/V | µs/call | MB/call | GB/s | of copy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in CASE.finditer(text):
        f = fields(m.group("args"))
        gqa = f.get("nr23", "[1,1]").strip("[]").split(",")[0]
        kv = f"{f.get('type_K')}/{f.get('type_V')}"
        gbs = float(m.group("gbs"))
        share = f"{100 * gbs / copy_gbs:.0f}%" if copy_gbs else "?"
        print(f"| {f.get('hsk')} | {f.get('nh')} | {gqa} | {f.get('kv')} | {f.get('nb')} | {kv} | "
              f"{float(m.group('us')):.2f} | {int(m.group('kb')) / 1000:.1f} | {gbs:.0f} | {share} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
