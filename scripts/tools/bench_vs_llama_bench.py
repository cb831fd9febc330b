#!/usr/bin/env python3
"""`tqgguf bench` against llama-bench from the same tree, same configurations, same run.

    python scripts/tools/bench_vs_llama_bench.py [--llama-bench PATH] [--model smollm2-135m]
        [--kv f16/f16,q8_0/q8_0,turbo4/turbo4] [-p 64] [-n 16] [-d 0,512] [-r 3] [-t 2] [-ngl 0]
        [-fa on] [--rounds 1] [--out DIR]

For each K/V pair (and each round) it runs llama-bench (`-o jsonl`) and `tqgguf bench -o jsonl`
as separate processes with the same -p/-n/-d/-r/-t/-ngl/-fa/-b/-ub, alternating which goes
first, then prints every test's t/s from both and the ratio tqgguf / llama-bench, plus the
load average before and after. llama-bench defaults to `tqgguf build --tools`'s CPU build;
with `-ngl 99` it defaults to the CUDA build's (`tqgguf build --backend cuda --tools`; the
installed engine must be the CUDA one then). Prints numbers; asserts nothing (exit 1 only when a run fails).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tqgguf.builder.driver import tool_path  # noqa: E402
from tqgguf.models import resolve_model  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def test_name(r: dict) -> str:
    s = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    return s + (f" @ d{r['n_depth']}" if r["n_depth"] else "")


def jsonl(text: str) -> list[dict]:
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", type=Path, default=None,
                    help="llama-bench binary (default: `tqgguf build --tools`'s, tools-cpu, or tools-cuda with -ngl != 0)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--kv", default="f16/f16,q8_0/q8_0,turbo4/turbo4", help="comma list of K/V pairs")
    ap.add_argument("-p", default="64")
    ap.add_argument("-n", default="16")
    ap.add_argument("-d", default="0,512")
    ap.add_argument("-r", default="3")
    ap.add_argument("-t", default=str(os.cpu_count() or 1))
    ap.add_argument("-ngl", default="0")
    ap.add_argument("-fa", default="on")
    ap.add_argument("-b", default="2048")
    ap.add_argument("-ub", default="512")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole comparison (order alternates)")
    ap.add_argument("--out", type=Path, default=None, help="keep both jsonl outputs here (default: a temp dir)")
    a = ap.parse_args()
    lb = a.llama_bench or tool_path("llama-bench", "cpu" if a.ngl == "0" else "cuda")
    model = resolve_model(a.model)
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-vs-"))
    out.mkdir(parents=True, exist_ok=True)
    common = ["-p", a.p, "-n", a.n, "-d", a.d, "-r", a.r, "-t", a.t, "-ngl", a.ngl, "-fa", a.fa, "-b", a.b, "-ub", a.ub]
    print(f"model {model.name}; llama-bench {lb}; {' '.join(common)}")
    print(f"load average before: {load()}")
    ours: dict[tuple, list[float]] = {}
    theirs: dict[tuple, list[float]] = {}
    failed = False
    step = 0
    for rnd in range(a.rounds):
        for pair in a.kv.split(","):
            k, v = pair.split("/")
            cmd_lb = [str(lb), "-m", str(model), "-ctk", k, "-ctv", v, "-o", "jsonl", *common]
            cmd_tq = [sys.executable, "-m", "tqgguf", "bench", str(model), "-ctk", k, "-ctv", v, "-o", "jsonl",
                      "--no-plot", "--dir", str(out / f"tqgguf-r{rnd}-{k}-{v}"), *common]
            order = [("llama-bench", cmd_lb), ("tqgguf", cmd_tq)]
            if step % 2:
                order.reverse()
            step += 1
            for who, cmd in order:
                res = subprocess.run(cmd, capture_output=True, text=True)
                (out / f"{who}-r{rnd}-{k}-{v}.jsonl").write_text(res.stdout)
                if res.returncode != 0:
                    print(f"{who} {k}/{v} failed (exit {res.returncode}):\n{res.stderr[-3000:]}", file=sys.stderr)
                    failed = True
                    continue
                for r in jsonl(res.stdout):
                    key = (k, v, test_name(r))
                    n = r["n_prompt"] + r["n_gen"]
                    (ours if who == "tqgguf" else theirs).setdefault(key, []).append(
                        (r["avg_ts"], [1e9 * n / ns for ns in r["samples_ns"]]))
    print(f"load average after: {load()}\n")
    # mean: llama-bench's avg_ts averaged over rounds; median: of every repetition of all
    # rounds (a GPU pp512 of a small model takes milliseconds and its repetitions spread by
    # 20%, so one slow repetition moves the mean); best: the fastest repetition (robust to
    # bursts of load from other processes on a shared machine)
    print("| K/V | test | llama-bench t/s | tqgguf bench t/s | ratio | llama-bench median | tqgguf median | "
          "ratio (median) | llama-bench best rep | tqgguf best rep | ratio (best) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios, med_ratios, best_ratios = [], [], []
    for key in theirs:
        if key not in ours:
            continue
        lb_ts = sum(x[0] for x in theirs[key]) / len(theirs[key])
        tq_ts = sum(x[0] for x in ours[key]) / len(ours[key])
        lb_all = [t for x in theirs[key] for t in x[1]]
        tq_all = [t for x in ours[key] for t in x[1]]
        lb_med, tq_med = statistics.median(lb_all), statistics.median(tq_all)
        lb_best, tq_best = max(lb_all), max(tq_all)
        ratios.append(tq_ts / lb_ts)
        med_ratios.append(tq_med / lb_med)
        best_ratios.append(tq_best / lb_best)
        print(f"| {key[0]}/{key[1]} | {key[2]} | {lb_ts:.2f} | {tq_ts:.2f} | {tq_ts / lb_ts:.3f} | "
              f"{lb_med:.2f} | {tq_med:.2f} | {tq_med / lb_med:.3f} | "
              f"{lb_best:.2f} | {tq_best:.2f} | {tq_best / lb_best:.3f} |")
    for name, rs in (("mean t/s", ratios), ("median rep", med_ratios), ("best rep", best_ratios)):
        if rs:
            print(f"ratio tqgguf/llama-bench ({name}): min {min(rs):.3f}, max {max(rs):.3f}, "
                  f"mean {sum(rs) / len(rs):.3f} over {len(rs)} tests")
    print(f"outputs in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
