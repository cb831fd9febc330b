"""Sweep outputs: the markdown table, results.csv, sweep.png (bits/value vs KLD with the Pareto
front) and the ``--recommend`` choice."""
from __future__ import annotations

import csv
import math
from pathlib import Path

COLUMNS = [("K", "ctk"), ("V", "ctv"), ("rot", "rot"), ("K-center", "k_center"), ("layer plan", "kv_plan"),
           ("bits/val", "bits_per_value"),
           ("KV B/tok", "kv_bytes_per_token"), ("vs f16", "compression_vs_f16"), ("PPL", "ppl"), ("ΔPPL %", "dppl_pct"),
           ("KLD", "kld_mean"), ("KLD p99", "kld_p99"), ("Same top p %", "same_top_p"), ("RMS Δp %", "rms_dp"),
           ("time s", "seconds")]


def sort_rows(rows: list[dict]) -> list[dict]:
    """By KV size ascending; within a size, best quality (lowest KLD) first; failed rows last."""
    def key(r):
        ok = r.get("status") == "ok"
        return (not ok, round(r.get("kv_bytes_per_token") or 1e30, 3), r.get("kld_mean") if ok else 1e30)
    return sorted(rows, key=key)


def _fmt(r: dict, field: str) -> str:
    v = r.get(field)
    if field == "k_center":  # rows from before the K-center axis have none
        return (v or "off") + (" (inactive)" if v and v != "off" and r.get("k_center_active") is False else "")
    if field == "kv_plan":  # rows from before the layer-plan axis have none
        return v or "—"
    if v is None:
        return "—"
    if field == "ppl":
        return f"{v:.4f} ± {r.get('ppl_err', 0):.4f}"
    if field == "kld_mean":
        return f"{v:.6f} ± {r.get('kld_err', 0):.6f}"
    if field == "same_top_p":
        return f"{v:.3f} ± {r.get('same_top_p_err', 0):.3f}"
    if field == "dppl_pct":
        return f"{v:+.2f}"
    if field in ("bits_per_value", "compression_vs_f16"):
        return f"{v:.2f}" + ("×" if field == "compression_vs_f16" else "")
    if field == "kv_bytes_per_token":
        return f"{v:.0f}"
    if field in ("kld_p99", "rms_dp"):
        return f"{v:.4f}" if field == "kld_p99" else f"{v:.3f}"
    if field == "seconds":
        return f"{v:.0f}"
    return str(v)


def markdown_table(rows: list[dict]) -> str:
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    lines = [head, sep]
    for r in sort_rows(rows):
        if r.get("status") != "ok":
            lines.append(f"| {r['ctk']} | {r['ctv']} | {r['rot']} | {_fmt(r, 'k_center')} | {_fmt(r, 'kv_plan')} | "
                         f"failed: {r.get('error', '?')} |")
            continue
        lines.append("| " + " | ".join(_fmt(r, f) for _, f in COLUMNS) + " |")
    return "\n".join(lines)


def write_csv(rows: list[dict], path: Path) -> None:
    fields = ["ctk", "ctv", "rot", "k_center", "k_center_active", "kv_plan", "status", "bits_per_value", "measured_bits_per_value", "kv_bytes_per_token",
              "compression_vs_f16", "k_mib", "v_mib", "kv_cells", "attn_rot_k", "attn_rot_v", "ppl", "ppl_err",
              "dppl_pct", "kld_mean", "kld_err", "kld_p99", "kld_median", "same_top_p", "same_top_p_err", "rms_dp",
              "rms_dp_err", "tokens", "chunks", "n_ctx", "seconds", "model", "text", "error"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in sort_rows(rows):
            w.writerow(r)


def pareto_front(rows: list[dict]) -> list[dict]:
    """Rows not dominated in (measured bits/value, KLD): no other row is both smaller and better."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("kld_mean") is not None and r["ctk"] + r["ctv"] != "f16f16"]
    front, best = [], math.inf
    for r in sorted(ok, key=lambda r: (r.get("measured_bits_per_value", r["bits_per_value"]), r["kld_mean"])):
        if r["kld_mean"] < best:
            front.append(r)
            best = r["kld_mean"]
    return front


def plot(rows: list[dict], path: Path, title: str) -> None:
    """sweep.png: bits/value (x) vs mean KLD (log y); rotation on/off, K-centered rows and
    mixed layer plans (at their effective bits/value) as marker styles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    styles = {"on": ("o", "tab:blue", "rotation on"), "off": ("x", "tab:red", "rotation off"),
              "n/a": ("s", "tab:gray", "no quantized cache"), "kc": ("D", "tab:green", "K-centered"),
              "plan": ("^", "tab:purple", "layer plan (mixed types)")}

    def style(r: dict) -> str:
        return "plan" if r.get("kv_plan") else "kc" if (r.get("k_center") or "off") != "off" else r["rot"]

    for rot, (marker, color, label) in styles.items():
        pts = [r for r in rows if r.get("status") == "ok" and style(r) == rot and r.get("kld_mean", 0) > 0
               and r["ctk"] + r["ctv"] != "f16f16"]
        if not pts:
            continue
        xs = [r.get("measured_bits_per_value", r["bits_per_value"]) for r in pts]
        ax.scatter(xs, [r["kld_mean"] for r in pts], marker=marker, color=color, label=label, s=40)
        for r, x in zip(pts, xs):
            ax.annotate(f"{r['ctk']}/{r['ctv']}" + (f" {r['kv_plan']}" if r.get("kv_plan") else ""), (x, r["kld_mean"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    front = pareto_front(rows)
    if front:
        ax.plot([r.get("measured_bits_per_value", r["bits_per_value"]) for r in front], [r["kld_mean"] for r in front],
                "-", color="black", lw=1, alpha=0.6, label="Pareto front")
    ax.set_yscale("log")
    ax.set_xlabel("KV cache bits per value (mean of K and V, from llama.cpp's allocation)")
    ax.set_ylabel("mean KL divergence vs f16 (log scale)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def recommend(rows: list[dict], *, max_kld: float | None = None, max_dppl: float | None = None) -> dict | None:
    """Smallest-KV configuration within the budget (ties: lower KLD); None if none qualifies.
    Rows whose K centering subtracted nothing (inactive: same run as off) are skipped."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("kld_mean") is not None
          and not ((r.get("k_center") or "off") != "off" and r.get("k_center_active") is False)]
    if max_kld is not None:
        ok = [r for r in ok if r["kld_mean"] <= max_kld]
    if max_dppl is not None:
        ok = [r for r in ok if r["dppl_pct"] <= max_dppl]
    return sort_rows(ok)[0] if ok else None


def serve_flags(row: dict, model: str, model_path: str | None = None) -> tuple[str, str]:
    """(tqgguf serve command, llama-server command) for a chosen row."""
    rot = row["rot"] == "off"
    kc = row.get("k_center") or "off"
    plan = row.get("kv_plan") or ""
    tq = f"tqgguf serve {model} --ctk {row['ctk']} --ctv {row['ctv']}" + (" --no-rot" if rot else "") + \
        (f" --k-center {kc}" if kc != "off" else "") + (f" {plan}" if plan else "")
    engine = row.get("k_center_engine") or ""
    calib_file = engine[5:] if engine.startswith("file ") else "<the calib file tqgguf wrote>"
    kc_env = "" if kc == "off" else (f"LLAMA_K_CENTER=file:{calib_file} " if kc.startswith("calib")
                                     else f"LLAMA_K_CENTER={kc} ")
    plan_env = f"LLAMA_KV_PLAN='{row['kv_plan_engine']}' " if row.get("kv_plan_engine") else ""
    ls = ("LLAMA_ATTN_ROT_DISABLE=1 " if rot else "") + kc_env + plan_env + \
        f"llama-server -m {model_path or model} -ctk {row['ctk']} -ctv {row['ctv']} -fa on"
    return tq, ls
