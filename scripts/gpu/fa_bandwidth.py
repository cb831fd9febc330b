#!/usr/bin/env python3
"""FLASH_ATTN_EXT micro-benchmark table from `test-backend-ops perf` output.

    python3 scripts/gpu/fa_bandwidth.py FA_PERF.txt COPY_BANDWIDTH.txt

Run here (it needs the built engine): test-backend-ops reports FLOPs for this op, so the
bytes are computed from each case's shape and the types' sizes from the built ggml
(tqgguf.cachetypes.type_info: bits/value = 8 * type_size / block_size): K and V bytes read
per call = kv * KV heads * (head dim K * bits(K) + head dim V * bits(V)) / 8. Q, the mask
and the output are left out (< 1% for one query). Prints one Markdown row per case: shape,
K/V, µs per call, KV MB per call, effective GB/s, and that as a share of the copy bandwidth
measured in the same run (scripts/gpu/copy_bandwidth.cu, read + write).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

CASE = re.compile(r"FLASH_ATTN_EXT\((?P<args>.*?)\):\s+\d+ runs -\s+(?P<us>[\d.]+) us/run")


def fields(args: str) -> dict[str, str]:
    """`k=v,k=[a,b],...` -> dict of the texts (brackets kept out of the split)."""
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\[[^\]]*\]|[^,]*)", args))


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    from tqgguf.cachetypes import type_info

    text = re.sub(r"\x1b\[[0-9;]*m", "", Path(sys.argv[1]).read_text(errors="replace"))
    copy = re.search(r"copy bandwidth: ([\d.]+) GB/s", Path(sys.argv[2]).read_text())
    copy_gbs = float(copy.group(1)) if copy else None
    print(f"copy bandwidth (read + write, same run): {copy_gbs} GB/s\n")
    print("| head dim | KV heads | GQA | KV | queries | K/V | µs/call | KV MB/call | GB/s | of copy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    seen = set()
    for m in CASE.finditer(text):
        f = fields(m.group("args"))
        key = m.group("args")
        if key in seen:
            continue
        seen.add(key)
        tk, tv = f["type_K"], f["type_V"]
        kv, nh, hk, hv = int(f["kv"]), int(f["nh"]), int(f["hsk"]), int(f["hsv"])
        nbytes = kv * nh * (hk * type_info(tk).bits_per_value + hv * type_info(tv).bits_per_value) / 8
        us = float(m.group("us"))
        gbs = nbytes / (us * 1e-6) / 1e9
        share = f"{100 * gbs / copy_gbs:.0f}%" if copy_gbs else "?"
        gqa = f["nr23"].strip("[]").split(",")[0]
        print(f"| {hk} | {nh} | {gqa} | {kv} | {f['nb']} | {tk}/{tv} | {us:.2f} | {nbytes / 1e6:.1f} | {gbs:.0f} | {share} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
