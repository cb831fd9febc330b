#!/usr/bin/env python3
"""Render a llama-perplexity grid TSV (scripts/gpu/kld_grid.sh) with tqgguf's sweep report:
markdown table (same columns and order as `tqgguf sweep`), results.csv and sweep.png.

    python scripts/maintain/grid_report.py GRID.tsv F16_PPL KV_VALUES_PER_TOKEN OUT_DIR "TITLE"

F16_PPL is the f16/f16 PPL of the same run (the ΔPPL reference). llama-perplexity's log does
not print the KV buffer sizes, so KV bytes per token are n_layer * n_embd_k_gqa (the
KV_VALUES_PER_TOKEN argument, per K and per V) times the format's bits / 8 — the equality of
that with what llama.cpp allocates is checked by tests/test_ppl.py.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tqgguf.sweep.report import markdown_table, plot, write_csv  # noqa: E402

BITS = {"f16": 16.0, "q8_0": 8.5, "q4_0": 4.5, "turbo4": 4.25, "turbo3": 3.25, "turbo2": 2.25}


def main() -> int:
    tsv, f16_ppl, per_tok = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    out, title = Path(sys.argv[4]), sys.argv[5]
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(tsv) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            bpt = per_tok * (BITS[r["ctk"]] + BITS[r["ctv"]]) / 8
            rows.append({"ctk": r["ctk"], "ctv": r["ctv"], "rot": r["rot"], "status": "ok",
                         "bits_per_value": (BITS[r["ctk"]] + BITS[r["ctv"]]) / 2, "kv_bytes_per_token": bpt,
                         "ppl": float(r["ppl"]), "ppl_err": float(r["ppl_err"]),
                         "dppl_pct": 100 * (float(r["ppl"]) / f16_ppl - 1), "kld_mean": float(r["kld"]),
                         "kld_err": float(r["kld_err"]), "kld_p99": float(r["kld_p99"]),
                         "same_top_p": float(r["same_top_p"]), "same_top_p_err": float(r["same_top_p_err"]),
                         "rms_dp": float(r["rms_dp"]), "rms_dp_err": float(r["rms_dp_err"]),
                         "seconds": float(r["seconds"])})
    f16_bpt = None
    for r in rows:  # f16 K+V bytes/token from a row: scale its bytes by its bits
        f16_bpt = r["kv_bytes_per_token"] * 16.0 / r["bits_per_value"]
        break
    for r in rows:
        r["compression_vs_f16"] = f16_bpt / r["kv_bytes_per_token"]
        r["measured_bits_per_value"] = 16.0 * r["kv_bytes_per_token"] / f16_bpt
    table = markdown_table(rows)
    (out / "table.md").write_text(f"{title}\n\n{table}\n")
    write_csv(rows, out / "results.csv")
    plot(rows, out / "sweep.png", title)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
