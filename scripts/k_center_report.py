#!/usr/bin/env python3
"""Render the K-centering measurements as before/after tables (results/k-center/tables.md).

    python scripts/k_center_report.py

Inputs: results/k-center/qwen2.5-coder-0.5b/results.jsonl (tqgguf sweep, --k-center off,bias)
and results/k-center/device/{smol,gemma}.tsv (scripts/device_k_center_grid.sh, calib vectors).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "results" / "k-center"
PAIRS = ["f16/f16", "q4_0/q4_0", "q8_0/q4_0", "turbo4/turbo4", "turbo3/turbo3", "q8_0/turbo3", "turbo4/q8_0"]


def table(title: str, rows: dict[tuple[str, str], dict], after: str, f16_ppl: float) -> str:
    out = [f"### {title}", "",
           f"| K / V | PPL off | PPL {after} | vs f16 off → {after} | KLD off | KLD {after} | Same top p off → {after} |",
           "|---|---|---|---|---|---|---|"]
    for pair in PAIRS:
        a, b = rows.get((pair, "off")), rows.get((pair, after))
        if not a or not b:
            continue
        out.append(f"| {pair} | {a['ppl']:.4f} | {b['ppl']:.4f} | {100 * (a['ppl'] / f16_ppl - 1):+.1f}% → "
                   f"{100 * (b['ppl'] / f16_ppl - 1):+.1f}% | {a['kld']:.4f} | {b['kld']:.4f} | "
                   f"{a['top']:.1f}% → {b['top']:.1f}% |")
    return "\n".join(out) + "\n"


def main() -> None:
    parts = ["# K centering: before / after", "",
             "WikiText-2 test, n_ctx 512, 20 chunks, rotation on, flash attention on. "
             "KLD and Same top p against the f16/f16 cache without centering.", ""]
    q = ROOT / "qwen2.5-coder-0.5b" / "results.jsonl"
    if q.exists():
        rows = {}
        for line in q.read_text().splitlines():
            r = json.loads(line)
            if r.get("status") != "ok":
                continue
            rows[(f"{r['ctk']}/{r['ctv']}", r.get("k_center") or "off")] = {
                "ppl": r["ppl"], "kld": r.get("kld_mean", 0.0), "top": r.get("same_top_p", 100.0)}
        f16 = rows[("f16/f16", "off")]["ppl"]
        parts.append(table("Qwen2.5-Coder-0.5B-Instruct Q4_K_M — `--k-center bias` (tqgguf sweep, 2-core CPU)",
                           rows, "bias", f16))
    for name, label in (("smol", "SmolLM2-135M-Instruct Q4_1"), ("gemma", "Gemma-3-270M Q4_K_M")):
        p = ROOT / "device" / f"{name}.tsv"
        if not p.exists():
            continue
        rows = {}
        with open(p) as f:
            for r in csv.DictReader(f, delimiter="\t"):
                kc = "off" if r["k_center"] == "off" else "calib"
                if (r["ctk"], r["ctv"], kc) == ("f16", "f16", "off"):  # the base itself: no KLD line
                    r.update(kld="0", same_top_p="100")
                rows[(f"{r['ctk']}/{r['ctv']}", kc)] = {"ppl": float(r["ppl"]), "kld": float(r["kld"] or 0),
                                                       "top": float(r["same_top_p"])}
        f16 = rows[("f16/f16", "off")]["ppl"]
        parts.append(table(f"{label} — `--k-center calib` (llama-perplexity with LLAMA_K_CENTER=file:…, "
                           "16-core CPU)", rows, "calib", f16))
    (ROOT / "tables.md").write_text("\n".join(parts))
    print("\n".join(parts))


if __name__ == "__main__":
    main()
