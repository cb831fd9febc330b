#!/usr/bin/env python3
"""Means per configuration of block-softmax-rounds.txt (the `## round ...` header, then llama-bench's row).

    python3 results/cpu-fa/s20/summarize.py results/cpu-fa/s20/block-softmax-rounds.txt
"""
import re
import sys
from collections import defaultdict

runs = defaultdict(list)
head = None
for line in open(sys.argv[1]):
    if line.startswith("## round"):
        f = line.split()
        if "DISTURBED" in line:  # a run marked as disturbed by another process: left out
            head = None
            continue
        head = " ".join(f[3:8])  # model K/V GROUPED=m dD k_center=...
    elif head and "tg32" in line:
        runs[head].append(float(re.search(r"\|\s+([\d.]+) ± ", line).group(1)))
        head = None
base = {}
for k, v in runs.items():
    m, kv, g, d, kc = k.split()
    if kv == "f16/f16":
        base[(m, d)] = sum(v) / len(v)
print("| model | K / V | softmax | depth | k-center | tg32 t/s (mean) | runs | vs f16/f16 |")
print("|---|---|---|---|---|---|---|---|")
for k, v in runs.items():
    m, kv, g, d, kc = k.split()
    mean = sum(v) / len(v)
    b = base.get((m, d))
    mode = {"GROUPED=1": "block", "GROUPED=exact": "per row (exact)"}.get(g, g)
    print(f"| {m} | {kv} | {mode} | {d} | {kc[9:]} | {mean:.1f} | {', '.join(f'{x:.1f}' for x in v)} | {mean / b:.2f}× |" if b else "")
