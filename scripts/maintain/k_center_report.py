#!/usr/bin/env python3
"""Render the K-centering measurements as before/after tables (results/k-center/tables.md).

    python scripts/maintain/k_center_report.py

Inputs (TSVs of scripts/gpu/k_center_grid.sh, llama-perplexity from the patched tree on
the GPU machine's 16-core CPU): results/k-center/device/qwen_{off,bias,full,calib,file}.tsv
and {smol,gemma}.tsv; plus the tqgguf sweep rows in results/k-center/qwen2.5-coder-0.5b/
(the same numbers through tqgguf's own path, as a cross-check).
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "results" / "k-center"
DEV = ROOT / "device"
PAIRS = ["f16/f16", "q4_0/q4_0", "q8_0/q4_0", "turbo4/turbo4", "turbo3/turbo3", "q8_0/turbo3", "turbo4/q8_0"]


def read_tsv(path: Path, label: str | None = None) -> dict[tuple[str, str], dict]:
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            kc = label or ("off" if r["k_center"] == "off" else "calib" if r["k_center"].endswith(".gguf")
                           else r["k_center"])
            rows[(f"{r['ctk']}/{r['ctv']}", kc)] = {"ppl": float(r["ppl"]), "kld": float(r["kld"] or 0),
                                                   "top": float(r["same_top_p"] or 100)}
    return rows


def base_ppl(log: Path) -> float:
    return float(re.findall(r"Final estimate: PPL = ([\d.]+)", log.read_text())[-1])


def cell(rows, pair, kc, f16) -> str:
    r = rows.get((pair, kc))
    if r is None:
        return "—"
    return f"{r['ppl']:.2f} ({100 * (r['ppl'] / f16 - 1):+.1f}%) · {r['kld']:.4f}"


def main() -> None:
    out = ["# K centering: before / after", "",
           "WikiText-2 test, n_ctx 512, 20 chunks, rotation on, flash attention on; llama-perplexity "
           "from the patched tree (CPU). Each cell: PPL (vs f16/f16 without centering) · mean KLD "
           "against the f16/f16 cache without centering.", ""]
    q = {}
    for name in ("off", "bias", "full", "calib"):
        p = DEV / f"qwen_{name}.tsv"
        if p.exists():
            q.update(read_tsv(p, name))
    if (DEV / "qwen_file.tsv").exists():
        q.update(read_tsv(DEV / "qwen_file.tsv", "file"))
    if q:
        f16 = base_ppl(DEV / "qwen_off.tsv.base.log")
        q[("f16/f16", "off")] = {"ppl": f16, "kld": 0.0, "top": 100.0}
        out += ["## Qwen2.5-Coder-0.5B-Instruct Q4_K_M (K bias)", "",
                f"f16/f16 without centering: PPL {f16:.4f}.", "",
                "| K / V | off | `--k-center bias` | `--k-center full` | `--k-center calib` | `tqgguf center` file |",
                "|---|---|---|---|---|---|"]
        for pair in PAIRS:
            out.append(f"| {pair} | " + " | ".join(cell(q, pair, kc, f16)
                                                  for kc in ("off", "bias", "full", "calib", "file")) + " |")
        out.append("")
        sweep = ROOT / "qwen2.5-coder-0.5b" / "results.jsonl"
        if sweep.exists():
            out += ["Cross-check, `tqgguf sweep` on the 2-core machine (same configs): "
                    + ", ".join(f"{r['key']} PPL {r['ppl']:.4f}" for r in map(json.loads, sweep.read_text().splitlines())
                                if r.get("status") == "ok"), ""]
    for name, label in (("smol", "SmolLM2-135M-Instruct Q4_1 (no K bias)"), ("gemma", "Gemma-3-270M Q4_K_M (no K bias)")):
        p = DEV / f"{name}.tsv"
        if not p.exists():
            continue
        rows = read_tsv(p)
        f16 = rows[("f16/f16", "off")]["ppl"]
        rows[("f16/f16", "off")].update(kld=0.0, top=100.0)  # the base itself
        out += [f"## {label}", "", "| K / V | off | `--k-center calib` |", "|---|---|---|"]
        for pair in PAIRS:
            out.append(f"| {pair} | {cell(rows, pair, 'off', f16)} | {cell(rows, pair, 'calib', f16)} |")
        out.append("")
    (ROOT / "tables.md").write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
