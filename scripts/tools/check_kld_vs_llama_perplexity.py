#!/usr/bin/env python3
"""Compare `tqgguf sweep` with llama-perplexity --kl-divergence built from the same patched tree.

    python scripts/tools/check_kld_vs_llama_perplexity.py [MODEL] [--chunks 10] [-o results/kld-check]

Runs `tqgguf sweep` for q8_0/turbo4 and turbo3/turbo3 (rotation on), then llama-perplexity
(`tqgguf build --tools`) twice per configuration: against its own f16 base file and against
the base file tqgguf wrote (same format), and prints mean KLD, KLD p99, Same top p, RMS Δp
and PPL side by side with the difference in units of the printed uncertainty.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tqgguf.builder.driver import tool_path  # noqa: E402
from tqgguf.fsutil import cache_dir, sha256_file_cached  # noqa: E402
from tqgguf.models import resolve_model  # noqa: E402
from tqgguf.sweep.runner import default_baseline_path  # noqa: E402
from tqgguf.texts import resolve_text  # noqa: E402

CONFIGS = [("q8_0", "turbo4"), ("turbo3", "turbo3")]
PAT = {"kld_mean": r"Mean    KLD:\s*([\d.]+)\s*±\s*([\d.]+)", "kld_p99": r"99\.0%   KLD:\s*([\d.]+)()",
       "same_top_p": r"Same top p:\s*([\d.]+)\s*±\s*([\d.]+)", "rms_dp": r"RMS Δp\s*:\s*([\d.]+)\s*±\s*([\d.]+)",
       "ppl": r"Mean PPL\(Q\)\s*:\s*([\d.]+)\s*±\s*([\d.]+)"}


def parse(log: str) -> dict:
    out = {}
    for k, p in PAT.items():
        m = re.search(p, log)
        if m:
            out[k] = (float(m.group(1)), float(m.group(2)) if m.group(2) else None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="smollm2-135m")
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("-o", "--out", type=Path, default=Path("results/kld-check"))
    a = ap.parse_args()
    model, text = resolve_model(a.model), resolve_text()
    a.out.mkdir(parents=True, exist_ok=True)
    for k, v in CONFIGS:
        subprocess.run(["tqgguf", "sweep", a.model, "-f", str(text.path), "-c", "512", "--chunks", str(a.chunks),
                        "--ctk", k, "--ctv", v, "--rot", "on", "-o", str(a.out / "tqgguf")], check=True,
                       stdout=subprocess.DEVNULL)
    rows = {r["key"]: r for r in map(json.loads, (a.out / "tqgguf" / "results.jsonl").read_text().splitlines())}
    ours_base = default_baseline_path(sha256_file_cached(model), text.sha256, 512, a.chunks)
    lp_base = cache_dir() / "baselines" / f"llama-perplexity-{model.stem}-c512-n{a.chunks}.kld"  # 0.25 GB: not in the repo
    lines = []
    log = subprocess.run([str(tool_path("llama-perplexity")), "-m", str(model), "-f", str(text.path), "-c", "512",
                          "-b", "512", "--chunks", str(a.chunks), "-fa", "on", "--kl-divergence-base", str(lp_base)],
                         capture_output=True, text=True)
    (a.out / "llama-perplexity-f16.log").write_text(log.stdout + log.stderr)
    for k, v in CONFIGS:
        ours = rows[f"{k}/{v}/rot=on"]
        for label, base in (("own-base", lp_base), ("tqgguf-base", ours_base)):
            res = subprocess.run([str(tool_path("llama-perplexity")), "-m", str(model), "-f", str(text.path), "-c", "512",
                                  "-b", "512", "--chunks", str(a.chunks), "-fa", "on", "-ctk", k, "-ctv", v,
                                  "--kl-divergence", "--kl-divergence-base", str(base)], capture_output=True, text=True)
            full = res.stdout + res.stderr
            (a.out / f"llama-perplexity-{k}-{v}-{label}.log").write_text(full)
            lp = parse(full)
            for stat, err_key in (("kld_mean", "kld_err"), ("kld_p99", None), ("same_top_p", "same_top_p_err"),
                                  ("rms_dp", "rms_dp_err"), ("ppl", "ppl_err")):
                if stat not in lp:
                    continue
                val, err = lp[stat]
                mine = ours[stat]
                sig = f"{abs(mine - val) / err:.2f} σ" if err else "—"
                lines.append(f"| {k}/{v} | {label} | {stat} | {mine:.6f} | {val:.6f} | {sig} |")
    table = "| K/V | llama-perplexity base | statistic | tqgguf sweep | llama-perplexity | |difference| |\n" \
            "|---|---|---|---|---|---|\n" + "\n".join(lines)
    (a.out / "comparison.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
