"""The results as llama-bench and llama-batched-bench print them: markdown tables (with our
kv_plan, k_center/rot and roofline columns when a run has them), csv, jsonl, and the plot
of t/s by depth (and S_TG by parallel sequences).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..shapes import SPEED_ONLY_NAME
from .spec import NO_PLAN, BenchSpec, load_results, resolved_k_center


def _size(b: int) -> str:
    return f"{b / 1024 ** 2:.2f} MiB" if b < 1024 ** 3 else f"{b / 1024 ** 3:.2f} GiB"


def _params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B"


def has_plans(rows_or_spec) -> bool:
    """Whether a layer-plan column is needed: some row has a plan, or (given a BenchSpec)
    some configuration has one."""
    if isinstance(rows_or_spec, BenchSpec):
        return any(c[3] != NO_PLAN for c in rows_or_spec.configs)
    return any(r.get("kv_plan") for r in rows_or_spec)


def has_center(rows_or_spec) -> bool:
    """Whether the K centering / rotation columns are needed: some row ran with K centering
    or without the rotation, or (given a BenchSpec) some configuration will
    (:func:`resolved_k_center`; auto on a model without a K bias is off)."""
    if isinstance(rows_or_spec, BenchSpec):
        spec = rows_or_spec
        return not spec.rotation or any(resolved_k_center(spec, c[0], c[3]) != "off" for c in spec.configs)
    return any(r.get("k_center", "off") != "off" or r.get("attn_rotation") is False for r in rows_or_spec)


def model_label(row: dict) -> str:
    """The model column: llama.cpp's description (``llama 8B Q4_0``), with "(speed only)" for
    a random-weight shape (tqgguf.shapes; the row's ``speed_only``)."""
    return row["model_type"] + (" (speed only)" if row.get("speed_only") else "")


def table_title(model: Path, rows: list[dict]) -> str:
    """The first line of table.md: the model file, and for a shape that its weights are random."""
    return f"model: {model.name}" + (f" ({SPEED_ONLY_NAME})" if any(r.get("speed_only") for r in rows) else "")


def has_roofline(rows_or_spec) -> bool:
    """Whether the roofline columns are shown: some row is a tg row with its bytes, or (given
    a BenchSpec) some test is a tg test."""
    if isinstance(rows_or_spec, BenchSpec):
        return any(t.n_gen for t in rows_or_spec.tests)
    return any("kv_read_bytes" in r for r in rows_or_spec)


def roofline_source(rows_or_spec) -> str:
    """What the bandwidth column divides by, for its header: "given" (--bandwidth) or
    "measured" (the ggml copy, tqgguf.engine.copy_bandwidth); of rows, the first that says."""
    if isinstance(rows_or_spec, BenchSpec):
        return "given" if rows_or_spec.bandwidth else "measured"
    return next((r["bandwidth_source"] for r in rows_or_spec if r.get("bandwidth_source")), "measured")


def _mb(key: str) -> Callable[[dict], str]:
    def fmt(r: dict) -> str:
        if key not in r:
            return "-"
        v = r[key] / 1e6
        return f"{v:.{2 if v < 10 else 1 if v < 100 else 0}f}"
    return fmt


def roofline_columns(source: str = "measured") -> list[tuple[str, int, Callable[[dict], str]]]:
    """KV and weight MB (10^6 bytes) read per generated token, and the percentage of the
    device's bandwidth they reach at the row's t/s; the header says whether that bandwidth
    was measured (ggml copy) or given (--bandwidth). pp rows and split weights show "-"."""
    return [("KV MB/tok", 9, _mb("kv_read_bytes")), ("W MB/tok", 9, _mb("weight_read_bytes")),
            (f"% BW {'meas' if source == 'measured' else 'given'}", 10,
             lambda r: f"{100 * r['bandwidth_fraction']:.1f}" if "bandwidth_fraction" in r else "-")]


def test_columns(rows: list[dict], with_plan: bool | None = None,
                 with_center: bool | None = None, with_roofline: bool | None = None,
                 roofline_src: str | None = None) -> list[tuple[str, int, Callable[[dict], str]]]:
    """llama-bench's markdown columns (header, width: negative = left-aligned, value):
    model, size, params, backend, ngl (GPU backends) or threads (CPU), type_k, type_v,
    (kv_plan: ours, when ``with_plan``; None = when some row has a plan), (k_center and rot:
    ours, when ``with_center``; None = :func:`has_center` of the rows), fa, test, t/s, (the
    roofline: ours, when ``with_roofline``; None = :func:`has_roofline` of the rows; header by
    ``roofline_src``, None = :func:`roofline_source` of the rows)."""
    cpu = all(r.get("backends", "CPU") == "CPU" for r in rows) if rows else True
    cols = [("model", -30, model_label), ("size", 10, lambda r: _size(r["model_size"])),
            ("params", 10, lambda r: _params(r["model_n_params"])), ("backend", -10, lambda r: r["backends"])]
    cols.append(("threads", 7, lambda r: str(r["n_threads"])) if cpu else ("ngl", 3, lambda r: str(r["n_gpu_layers"])))
    cols += [("type_k", 6, lambda r: r["type_k"]), ("type_v", 6, lambda r: r["type_v"])]
    if has_plans(rows) if with_plan is None else with_plan:
        cols.append(("kv_plan", -24, lambda r: r.get("kv_plan") or "-"))
    if has_center(rows) if with_center is None else with_center:
        cols += [("k_center", -8, lambda r: r.get("k_center", "off")),
                 ("rot", 3, lambda r: "0" if r.get("attn_rotation") is False else "1")]
    cols += [("fa", 3, lambda r: str(r["flash_attn"])), ("test", 15, lambda r: r["test"]),
             ("t/s", 20, lambda r: f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}")]
    if has_roofline(rows) if with_roofline is None else with_roofline:
        cols += roofline_columns(roofline_src or roofline_source(rows))
    return cols


BATCHED_COLUMNS = [("type_k", -6, "type_k"), ("type_v", -6, "type_v"), ("PP", 6, "pp"), ("TG", 6, "tg"),
                   ("B", 4, "pl"), ("N_KV", 6, "n_kv"), ("T_PP s", 8, "t_pp"), ("S_PP t/s", 8, "speed_pp"),
                   ("T_TG s", 8, "t_tg"), ("S_TG t/s", 8, "speed_tg"), ("T s", 8, "t"), ("S t/s", 8, "speed")]


def _cell(text: str, width: int) -> str:
    return text.ljust(-width) if width < 0 else text.rjust(width)


def markdown_header(rows: list[dict], columns=None) -> str:
    """The two header lines of the test table (llama-bench's layout)."""
    cols = columns or test_columns(rows)
    return ("| " + " | ".join(_cell(h, w) for h, w, _ in cols) + " |\n"
            + "|" + "|".join(" " + ("-" * (abs(w) - 1) + (":" if w > 0 else "-")) + " " for _, w, _ in cols) + "|")


def markdown_row(row: dict, columns=None) -> str:
    cols = columns or test_columns([row])
    return "| " + " | ".join(_cell(f(row), w) for _, w, f in cols) + " |"


def batched_columns(with_plan: bool = False) -> list[tuple[str, int, str]]:
    """llama-batched-bench's columns, with our kv_plan column after type_v when ``with_plan``."""
    return BATCHED_COLUMNS[:2] + [("kv_plan", -24, "kv_plan")] + BATCHED_COLUMNS[2:] if with_plan else BATCHED_COLUMNS


def batched_header(with_plan: bool = False) -> str:
    cols = batched_columns(with_plan)
    return ("| " + " | ".join(_cell(h, w) for h, w, _ in cols) + " |\n"
            + "|" + "|".join(" " + ("-" * (abs(w) - 1) + (":" if w > 0 else "-")) + " " for _, w, _ in cols) + "|")


def batched_row(r: dict, with_plan: bool = False) -> str:
    def fmt(k):
        v = r.get(k) or "-" if k == "kv_plan" else r[k]
        if k in ("t_pp", "t_tg", "t"):
            return f"{v:.3f}"
        if isinstance(v, float):
            return f"{v:.2f}"
        return str(v)
    return "| " + " | ".join(_cell(fmt(k), w) for _, w, k in batched_columns(with_plan)) + " |"


def markdown(rows: list[dict]) -> str:
    """The whole result as markdown: the test table, then the batched table (if any)."""
    tests = [r for r in rows if r.get("kind", "test") == "test"]
    batched = [r for r in rows if r.get("kind") == "batched"]
    parts = []
    if tests:
        cols = test_columns(tests)
        parts.append(markdown_header(tests) + "\n" + "\n".join(markdown_row(r, cols) for r in tests))
    if batched:
        wp = has_plans(batched)
        parts.append(batched_header(wp) + "\n" + "\n".join(batched_row(r, wp) for r in batched))
    return "\n\n".join(parts)


#: csv columns: llama-bench's field names for tests, llama-batched-bench's for batched rows.
CSV_TEST_FIELDS = ["model_filename", "model_type", "model_size", "model_n_params", "backends", "n_batch", "n_ubatch",
                   "n_threads", "type_k", "type_v", "n_gpu_layers", "flash_attn", "n_prompt", "n_gen", "n_depth",
                   "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts"]
CSV_BATCHED_FIELDS = ["model_filename", "type_k", "type_v", "n_kv_max", "n_batch", "n_ubatch", "flash_attn",
                      "is_pp_shared", "n_gpu_layers", "n_threads", "pp", "tg", "pl", "n_kv", "t_pp", "speed_pp",
                      "t_tg", "speed_tg", "t", "speed"]


#: csv columns of the roofline (ours), after the others when a run has tg tests
CSV_ROOFLINE_FIELDS = ["kv_read_bytes", "weight_read_bytes", "bandwidth_bytes_per_s", "bandwidth_source",
                       "bandwidth_fraction"]


def csv_fields(kind: str, with_plan: bool = False, with_center: bool = False, with_roofline: bool = False) -> list[str]:
    """The csv columns of a row kind ("test", "batched", or "both": one table for a run
    that has both, a ``kind`` column first, then llama-bench's columns and the batched ones
    it lacks, so a csv reader sees one header); ``with_plan`` appends ours: kv_plan,
    bits_per_value; ``with_center``: k_center, attn_rotation; ``with_roofline``:
    :data:`CSV_ROOFLINE_FIELDS`."""
    if kind == "both":
        base = ["kind"] + CSV_TEST_FIELDS + [f for f in CSV_BATCHED_FIELDS if f not in CSV_TEST_FIELDS]
    else:
        base = CSV_TEST_FIELDS if kind == "test" else CSV_BATCHED_FIELDS
    return (base + (["kv_plan", "bits_per_value"] if with_plan else []) + (["k_center", "attn_rotation"] if with_center else [])
            + (CSV_ROOFLINE_FIELDS if with_roofline and kind != "batched" else []))


def csv_line(values: list) -> str:
    import csv
    import io

    s = io.StringIO()
    csv.writer(s, lineterminator="\n").writerow(values)
    return s.getvalue().rstrip("\n")


def csv_text(rows: list[dict]) -> str:
    """llama-bench-style csv: a header line, then one line per row; one table even when the
    rows are of both kinds (:func:`csv_fields` "both")."""
    kinds = {r.get("kind", "test") for r in rows}
    fields = csv_fields(kinds.pop() if len(kinds) == 1 else "both", has_plans(rows), has_center(rows), has_roofline(rows))
    return "\n".join([csv_line(fields)] + [csv_row(r, fields) for r in rows])


def csv_row(row: dict, fields: list[str]) -> str:
    """One csv line of a row in the columns ``fields`` (:func:`csv_fields`; ``kind`` is the
    row's kind, test when it has none)."""
    return csv_line([row.get("kind", "test") if f == "kind" else row.get(f) for f in fields])


def directory_rows(spec: BenchSpec, latest: list[dict]) -> list[dict]:
    """Every result in ``spec.results`` for the table and the plot, the rows of this run
    (``latest``, stored rows with their keys) last."""
    keys = {r["key"] for r in latest}
    return [r for k, r in load_results(spec.results).items() if k not in keys] + latest


def jsonl_line(row: dict) -> str:
    """One result as a JSON line (the stored row without our resume key)."""
    return json.dumps({k: v for k, v in row.items() if k != "key"})


def config_label(r: dict) -> str:
    fa = "" if r.get("fa_asked", "auto") == "auto" else f" fa {r['fa_asked']}"
    plan = f" {r['kv_plan']}" if r.get("kv_plan") else ""
    return f"{r['type_k']}/{r['type_v']}{fa}{plan}"


def plot(rows: list[dict], path: Path, title: str) -> None:
    """PNG of t/s against depth, one line per K/V configuration (error bars: std over
    repetitions), one panel per pp and tg test size; a last panel with S_TG against parallel
    sequences when the rows have batched results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tests = [r for r in rows if r.get("kind", "test") == "test"]
    batched = [r for r in rows if r.get("kind") == "batched"]
    kinds = list(dict.fromkeys((f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") for r in tests))
    n_panels = len(kinds) + (1 if batched else 0)
    if n_panels == 0:
        return
    fig, axes = plt.subplots(1, n_panels, figsize=(6 * n_panels, 4.5), dpi=110, squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        sel = [r for r in tests if (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") == kind]
        for label in dict.fromkeys(config_label(r) for r in sel):
            pts = sorted((r["n_depth"], r["avg_ts"], r["stddev_ts"]) for r in sel if config_label(r) == label)
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o",
                        capsize=3, label=label)
        ax.set_title(kind)
        ax.set_xlabel("depth (tokens in the KV cache before the test)")
        ax.set_ylabel("tokens/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if batched:
        ax = axes[0][-1]
        for label in dict.fromkeys(f"{config_label(r)} pp{r['pp']} tg{r['tg']}" for r in batched):
            pts = sorted((r["pl"], r["speed_tg"]) for r in batched
                         if f"{config_label(r)} pp{r['pp']} tg{r['tg']}" == label)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_title("batched: S_TG")
        ax.set_xlabel("parallel sequences")
        ax.set_ylabel("generated tokens/s, all sequences")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
