"""Run a sweep: f16 baseline once (stored, reusable), then every configuration scored against it.

Rows are appended to ``results.jsonl`` as each finishes; a rerun with the same model, text,
n_ctx and chunks skips rows already there (finished or failed), so an interrupted sweep
resumes where it stopped.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..cachetypes import type_info
from ..fsutil import cache_dir, sha256_file_cached
from ..quality import (BaselineMeta, BaselineMismatchError, BaselineReader, BaselineWriter, KLDStats, check_length,
                       chunk_logits, encode_base_rows, tokenize)
from ..runtime import EngineError, open_model, training_context_warning
from ..texts import Text
from .grid import BASELINE, Config

Progress = Callable[[str, int, int, int, int], None]  # (label, config i, n configs, chunk j, n chunks)


@dataclass
class SweepSpec:
    """What to run. ``chunks`` is the number of n_ctx chunks scored per configuration."""

    model: Path
    text: Text
    configs: list[Config]
    n_ctx: int = 512
    chunks: int = 20
    out_dir: Path = Path("sweep-out")
    baseline: Path | None = None
    threads: int | None = None
    n_gpu_layers: int = 0
    offload: object = None  # tqgguf.devices.Offload; None: n_gpu_layers alone

    def where(self) -> str:
        """What the rows are measured on: ``cpu`` or the offload's key (tqgguf.devices.Offload.key)."""
        if self.offload is not None:
            return self.offload.key()
        return "cpu" if self.n_gpu_layers == 0 else f"ngl={self.n_gpu_layers}"


def default_baseline_path(model_sha: str, text_sha: str, n_ctx: int, chunks: int, gpu: bool = False) -> Path:
    """Where the f16 baseline of (model, text, n_ctx, chunks) is kept; GPU runs (-ngl != 0)
    get their own file, since the GPU's f16 logits differ from the CPU's (docs/CUDA.md)."""
    return cache_dir() / "baselines" / f"{model_sha[:16]}-{text_sha[:12]}-c{n_ctx}-n{chunks}{'-gpu' if gpu else ''}.kld"


def read_rows(results: Path) -> list[dict]:
    """Every row of a results.jsonl (none when it does not exist); a line cut by a kill is
    skipped, so that row reruns."""
    rows = []
    if results.exists():
        for line in results.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def load_done(rows: list[dict], run_id: str, where: str = "cpu") -> dict[str, dict]:
    """The rows of run ``run_id`` measured on ``where`` (a row without the field was measured
    before devices were recorded: on the CPU), by configuration key; a row of another device
    set is measured again."""
    return {row["key"]: row for row in rows if row.get("run_id") == run_id and row.get("offload", "cpu") == where}


class SweepDirError(ValueError):
    """The output directory holds a sweep of another model, text, n_ctx or chunk count."""


def check_same_run(rows: list[dict], out_dir: Path, run_id: str, model: str, text: str, n_ctx: int,
                   chunks: int) -> None:
    """Refuse an output directory whose results.jsonl ``rows`` hold rows of another run (model,
    text, n_ctx, chunks): its table.md, results.csv and sweep.png show one run's map and would
    be replaced by this one's. Raises SweepDirError naming what differs, there and here."""
    for row in rows:
        other = row.get("run_id")
        if other and other != run_id:
            there = {"model": row.get("model"), "text": row.get("text"), "n_ctx": row.get("n_ctx"),
                     "chunks": int(other.rsplit("-n", 1)[-1]) if other.rsplit("-n", 1)[-1].isdigit() else None}
            here = {"model": model, "text": text, "n_ctx": n_ctx, "chunks": chunks}
            diff = [f"{k} {there[k]} there, {here[k]} here" for k in here if there[k] != here[k]]
            raise SweepDirError(
                f"{out_dir} holds the sweep of another run ({'; '.join(diff) or 'another model file'}): "
                f"this one would replace its table.md, results.csv and sweep.png. Give another -o DIR.")


def check_out_dir(out_dir: Path) -> None:
    """Create out_dir and prove it is writable; PermissionError/OSError with a clear message."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise OSError(f"output directory {out_dir} is not writable: {e.strerror or e}") from e


def _kv_fields(report, cells: int) -> dict:
    """The row's KV fields; kv_bytes_per_token is the engine report's exact count
    (tqgguf.runtime.KVReport), not the 2-decimal MiB over the cells."""
    return {"k_mib": report.k_mib, "v_mib": report.v_mib, "kv_cells": cells,
            "kv_bytes_per_token": report.kv_bytes_per_token,
            "attn_rot_k": report.attn_rot_k, "attn_rot_v": report.attn_rot_v, "flash_attn": report.flash_attn}


def run_sweep(spec: SweepSpec, *, progress: Progress | None = None, log: Callable[[str], None] = print) -> list[dict]:
    """Run every configuration of ``spec``; return all rows (resumed ones included).

    Raises BaselineMismatchError (a baseline from another model/text/n_ctx), SweepDirError (the
    output dir holds another run's sweep), TextTooShortError, OSError (output dir not writable). A configuration that fails (NaN logits, engine error)
    becomes a row with status "failed" and its reason; the sweep goes on.
    """
    check_out_dir(spec.out_dir)
    results = spec.out_dir / "results.jsonl"
    model_sha = sha256_file_cached(spec.model)
    run_id = f"{model_sha[:16]}-{spec.text.sha256[:12]}-c{spec.n_ctx}-n{spec.chunks}"
    rows = read_rows(results)  # read once: another run's rows refuse the dir, this run's resume
    check_same_run(rows, spec.out_dir, run_id, spec.model.name, spec.text.label, spec.n_ctx, spec.chunks)
    done = load_done(rows, run_id, spec.where())
    todo = [c for c in spec.configs if c.key not in done]
    if done:
        log(f"resuming: {len(done)} of {len(spec.configs)} configurations already in {results}")
    n_cfg = len(spec.configs)
    base_path = spec.baseline or default_baseline_path(model_sha, spec.text.sha256, spec.n_ctx, spec.chunks, spec.where() != "cpu")
    reader = None
    common = {"run_id": run_id, "model": spec.model.name, "model_sha256": model_sha, "text": spec.text.label,
              "n_ctx": spec.n_ctx, "offload": spec.where()}
    if not todo:
        return _finalize(done, spec.configs)

    def engine_for(cfg: Config):
        return open_model(spec.model, ctk=cfg.ctk, ctv=cfg.ctv, n_ctx=spec.n_ctx, flash_attn="on",
                          rotation=cfg.rot is not False, n_threads=spec.threads, n_gpu_layers=spec.n_gpu_layers,
                          offload=spec.offload, k_center=cfg.kc, kv_boundary=cfg.boundary or None, kv_swa=cfg.swa or None,
                          kv_plan=cfg.kvmap or None)

    def bits(cfg: Config) -> float:
        return (type_info(cfg.ctk).bits_per_value + type_info(cfg.ctv).bits_per_value) / 2

    # tokens + baseline
    base_engine = engine_for(BASELINE)
    if warning := training_context_warning(base_engine.report.n_ctx, base_engine.report.n_ctx_train):
        log(warning)
    try:
        tokens = tokenize(base_engine, spec.text.content)
        check_length(len(tokens), spec.n_ctx)
        n_chunk = min(spec.chunks, len(tokens) // spec.n_ctx)
        n_vocab = base_engine.llama.n_vocab()
        meta = BaselineMeta(model_sha, spec.model.name, spec.text.sha256, spec.text.label, spec.n_ctx, n_chunk, n_vocab)
        first = spec.n_ctx // 2
        if Path(base_path).exists():
            reader = BaselineReader(base_path)
            if reader.meta is not None:
                reader.meta.check_compatible(meta, Path(base_path))
            if (reader.n_ctx, reader.n_vocab) != (spec.n_ctx, n_vocab) or reader.n_chunk < n_chunk or \
                    not np.array_equal(np.asarray(reader.tokens[: n_chunk * spec.n_ctx]), tokens[: n_chunk * spec.n_ctx]):
                raise BaselineMismatchError(
                    f"baseline {base_path} does not match this run (n_ctx {reader.n_ctx}, n_vocab {reader.n_vocab}, "
                    f"{reader.n_chunk} chunks, or different tokens: another model or text)")
            log(f"baseline: reusing {base_path}")
        if reader is None or BASELINE.key in [c.key for c in todo]:
            writer = None if reader is not None else BaselineWriter(Path(base_path), meta, tokens)
            t0 = time.time()
            stats = KLDStats()
            try:
                for c, logits in chunk_logits(base_engine, tokens, spec.n_ctx, min(spec.n_ctx, 512), n_chunk):
                    rows = encode_base_rows(logits) if writer else reader.chunk(c)
                    if writer:
                        writer.add_chunk(rows)
                    stats.add(logits, rows, tokens[c * spec.n_ctx + first + 1:(c + 1) * spec.n_ctx])
                    if progress:
                        progress(BASELINE.key + " (baseline)", 1, n_cfg, c + 1, n_chunk)
            except BaseException:
                if writer:
                    writer.abort()
                raise
            if writer:
                writer.close()
                log(f"baseline: wrote {base_path} ({Path(base_path).stat().st_size / 1e6:.0f} MB)")
                reader = BaselineReader(base_path)
            if BASELINE.key not in done:
                row = {**common, "key": BASELINE.key, "ctk": "f16", "ctv": "f16", "rot": "n/a", "k_center": "off",
                       "status": "ok",
                       "chunks": n_chunk, "bits_per_value": bits(BASELINE), **_kv_fields(base_engine.report, base_engine.report.cells),
                       **stats.summary(), "dppl_pct": 0.0, "seconds": time.time() - t0}
                _append(results, row)
                done[BASELINE.key] = row
    finally:
        base_engine.close()

    f16_bpt = done[BASELINE.key]["kv_bytes_per_token"]
    f16_ppl = done[BASELINE.key]["ppl"]
    for i, cfg in enumerate(spec.configs, start=1):
        if cfg.key in done:
            continue
        t0 = time.time()
        row = {**common, "key": cfg.key, "ctk": cfg.ctk, "ctv": cfg.ctv, "rot": cfg.rot_label, "k_center": cfg.kc,
               "chunks": n_chunk, "kv_plan": cfg.plan_label,
               "bits_per_value": bits(cfg)}
        try:
            engine = engine_for(cfg)
        except (EngineError, ValueError) as e:
            row.update(status="failed", error=str(e), seconds=time.time() - t0)
            _append(results, row)
            done[cfg.key] = row
            log(f"{cfg.key}: failed: {e}")
            continue
        stats = KLDStats()
        try:
            row.update(_kv_fields(engine.report, engine.report.cells),
                       k_center_active=engine.report.k_center_active, k_center_engine=engine.report.k_center,
                       k_center_reason=engine.k_center_reason,
                       devices=",".join(p.device for p in engine.placement if p.layers and p.device != "CPU") or "CPU",
                       placement=engine.placement_lines())
            if engine.kv_plan is not None:  # a mixed plan: the engine's own count of bits per value
                row.update(bits_per_value=engine.report.bits_per_value, kv_plan_engine=engine.kv_plan.engine_value(),
                           kv_plan_layers=engine.report.kv_plan_layers)
            for c, logits in chunk_logits(engine, tokens, spec.n_ctx, min(spec.n_ctx, 512), n_chunk):
                if not np.isfinite(logits).all():
                    raise FloatingPointError(f"non-finite logits in chunk {c + 1} "
                                             f"({int((~np.isfinite(logits)).sum())} values)")
                stats.add(logits, reader.chunk(c), tokens[c * spec.n_ctx + first + 1:(c + 1) * spec.n_ctx])
                if progress:
                    progress(cfg.key, i, n_cfg, c + 1, n_chunk)
            row.update(status="ok", **stats.summary())
            row["dppl_pct"] = 100.0 * (row["ppl"] / f16_ppl - 1.0)
            row["compression_vs_f16"] = f16_bpt / row["kv_bytes_per_token"]
            row["measured_bits_per_value"] = 16.0 * row["kv_bytes_per_token"] / f16_bpt
        except (FloatingPointError, RuntimeError) as e:
            row.update(status="failed", error=str(e))
            log(f"{cfg.key}: failed: {e}")
        finally:
            engine.close()
        row["seconds"] = time.time() - t0
        _append(results, row)
        done[cfg.key] = row
    return _finalize(done, spec.configs)


def _finalize(done: dict[str, dict], configs: list[Config]) -> list[dict]:
    """Fill the fields that depend on the f16 row; return rows in configuration order."""
    base = done.get(BASELINE.key, {})
    base.setdefault("compression_vs_f16", 1.0)
    base.setdefault("measured_bits_per_value", 16.0)
    for row in done.values():
        # ΔPPL against the f16 run's own PPL (the uint16 baseline file clips log-probs 16 nats
        # below the top, so llama-perplexity's "PPL(base)" is slightly lower; kept as ppl_base)
        if row.get("status") == "ok" and base.get("ppl"):
            row["dppl_pct"] = 100.0 * (row["ppl"] / base["ppl"] - 1.0)
    keys = [c.key for c in configs]
    # every row of this run (same model/text/n_ctx/chunks) in the output dir: sweeps of
    # different grids into one dir build up one map
    return [done[k] for k in keys if k in done] + [r for k, r in done.items() if k not in keys]


def _append(results: Path, row: dict) -> None:
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
    with open(results, "a") as f:
        f.write(json.dumps(clean) + "\n")
        f.flush()
