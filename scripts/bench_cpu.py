#!/usr/bin/env python3
"""CPU speed of K/V cache types with llama-bench (built by `tqgguf build --tools`).

    python scripts/bench_cpu.py [MODEL] [-d 2048] [-p 512] [-n 64] [-r 2] [-t THREADS] [--types f16,q4_0,turbo4,turbo3]

Runs llama-bench once per type T with -ctk T -ctv T -fa 1 at depth -d, prints llama-bench's
markdown rows (pp and tg tokens/s) and a summary relative to q4_0. Prints numbers; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tqgguf.builder.driver import tool_path  # noqa: E402
from tqgguf.models import resolve_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="smollm2-135m")
    ap.add_argument("-d", "--depth", type=int, default=2048)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("--types", default="f16,q4_0,turbo4,turbo3")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON lines")
    a = ap.parse_args()
    bench = tool_path("llama-bench")
    model = resolve_model(a.model)
    rows = []
    for t in a.types.split(","):
        cmd = [str(bench), "-m", str(model), "-ctk", t, "-ctv", t, "-fa", "1", "-p", str(a.p), "-n", str(a.n),
               "-d", str(a.depth), "-r", str(a.r), "-o", "jsonl"]
        if a.threads:
            cmd += ["-t", str(a.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{t}: llama-bench failed:\n{out.stderr[-2000:]}", file=sys.stderr)
            continue
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                r["cache_type"] = t
                rows.append(r)
    print("| K=V type | test | t/s |\n|---|---|---|")
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        print(f"| {r['cache_type']} | {test} @ d{r['n_depth']} | {r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} |")
    if a.json:
        a.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
