"""Running a bench: :func:`run_bench` opens the model once per K/V configuration, runs
llama-bench's tests on it (one context each, the depth prefix restored from a saved
sequence state), then llama-batched-bench's table (tqgguf.bench.batched), appending each
row to ``results.jsonl`` as it finishes and reusing the rows already there.
"""
from __future__ import annotations

import ctypes
import statistics
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Callable

from ..fsutil import sha256_file_cached
from ..kvplan import plan_label
from .batched import run_batched
from .decode import Decoder, model_facts, vocab
from .roofline import device_bandwidth, roofline_fields
from .spec import (NO_PLAN, BenchSpec, Test, append_row, axis_plan, batched_key, load_results, most_cells,
                   plan_fields, test_key, where_key)


def _stats(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), as llama-bench's avg/stdev."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass
class _DepthState:
    """The saved sequence state after a depth prefill (llama-bench's ctx_state)."""

    depth: int = 0
    buf: object = None


def _run_test(spec: BenchSpec, engine, t: Test, facts: dict, cache: _DepthState, seed: int,
              roofline: tuple[dict, Callable[[str], tuple[float, str]]] | None = None) -> dict:
    import llama_cpp

    from ..engine import cpu_threadpool
    from ..runtime import open_context

    # llama-bench's setup: one context and one CPU threadpool per test
    with closing(open_context(engine, n_ctx=t.n_ctx, n_batch=spec.n_batch, n_ubatch=spec.n_ubatch)) as ctx, \
            cpu_threadpool(ctx.ctx, engine.n_threads):
        dec = Decoder(ctx.ctx, *vocab(engine), seed=seed)
        dec.clear()
        if spec.warmup:
            if t.n_prompt:
                dec.prompt(dec.tokens(t.n_prompt), spec.n_batch)
            if t.n_gen:
                dec.gen(dec.tokens(1))
        samples_ns, kv_after, decoded = [], [], []
        for _ in range(spec.reps):
            dec.clear()
            if t.n_depth:
                restored = False
                if cache.depth == t.n_depth and cache.buf is not None:
                    restored = llama_cpp.llama_state_seq_set_data(ctx.ctx, cache.buf, len(cache.buf), 0) != 0
                if not restored:
                    dec.clear()
                    dec.prompt(dec.tokens(t.n_depth), spec.n_batch)
                    size = llama_cpp.llama_state_seq_get_size(ctx.ctx, 0)
                    buf = (ctypes.c_uint8 * size)()
                    llama_cpp.llama_state_seq_get_data(ctx.ctx, buf, size, 0)
                    cache.depth, cache.buf = t.n_depth, buf
            toks = dec.tokens(t.n_prompt or t.n_gen)
            t0 = time.perf_counter_ns()
            n = dec.prompt(toks, spec.n_batch) if t.n_prompt else dec.gen(toks)
            samples_ns.append(time.perf_counter_ns() - t0)
            decoded.append(n)
            kv_after.append(dec.pos_max() + 1)
        report = ctx.report
    n_tokens = t.n_prompt + t.n_gen
    ts = [1e9 * n_tokens / s for s in samples_ns]
    avg_ts, sd_ts = _stats(ts)
    avg_ns, sd_ns = _stats([float(s) for s in samples_ns])
    return {**facts, "n_batch": spec.n_batch, "n_ubatch": min(spec.n_ubatch, spec.n_batch),
            "n_threads": engine.n_threads, "type_k": t.ctk, "type_v": t.ctv, "n_gpu_layers": engine.n_gpu_layers,
            "flash_attn": int(engine.flash_attn), "fa_asked": t.fa, "n_prompt": t.n_prompt, "n_gen": t.n_gen,
            "n_depth": t.n_depth, "test": t.name,
            "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "avg_ns": int(avg_ns), "stddev_ns": int(sd_ns), "avg_ts": avg_ts, "stddev_ts": sd_ts,
            "samples_ns": samples_ns, "samples_ts": ts, "n_decoded": decoded, "n_kv_after": kv_after,
            "k_mib": report.k_mib, "v_mib": report.v_mib, "warmup": spec.warmup, "reps": spec.reps,
            **plan_fields(t.plan, engine),
            **(roofline_fields(t, report, roofline[0], avg_ts, engine.placement, roofline[1]) if roofline else {})}


def run_bench(spec: BenchSpec, *, on_result: Callable[[dict, bool], None] | None = None,
              log: Callable[[str], None] | None = None) -> list[dict]:
    """Run ``spec`` (call :func:`validate` first); return the rows of this run in order.

    Each row is appended to ``spec.results`` as soon as it is measured and passed to
    ``on_result(row, resumed)``; rows already in the file under the same key are reused
    (resumed=True) without running, unless another engine build measured them (the row's
    ``engine_fingerprint``, tqgguf.builder's build record; rows carry it and llama.cpp's
    commit as ``build_commit``, as llama-bench does). Raises EngineError / CacheTypeError from opening a
    configuration, RuntimeError when llama_decode fails, OSError when the file cannot be
    written.
    """
    from ..builder import installed_build_info
    from ..runtime import open_model

    spec.out_dir.mkdir(parents=True, exist_ok=True)
    build = installed_build_info() or {}
    engine_fp = build.get("fingerprint", "")
    stored = load_results(spec.results)
    # a result of another engine build is measured again (rows from before the field: kept)
    done = {k: r for k, r in stored.items() if r.get("engine_fingerprint", engine_fp) == engine_fp}
    if log and len(done) < len(stored):
        log(f"{len(stored) - len(done)} stored result(s) are from another engine build: measured again")
    model_sha = sha256_file_cached(spec.model)
    rows: list[dict] = []

    def emit(key: str, row: dict | None, resumed: bool) -> None:
        if not resumed:
            row = {"key": key, "kind": row.get("kind", "test"), "model_filename": str(spec.model),
                   "model_sha256": model_sha, "build_commit": build.get("llama_cpp_commit", ""),
                   "engine_fingerprint": engine_fp, **row}
            append_row(spec.results, row)
            done[key] = row
        rows.append(done[key])
        if on_result:
            on_result(done[key], resumed)

    shown_placement = []

    def opened(cfg):
        engine = _open(cfg)
        lines = engine.placement_lines()
        if lines != shown_placement:  # where the layers and their K/V cache live, when it changes
            shown_placement[:] = lines
            for ln in lines if log else ():
                log(f"placement ({cfg[0]}/{cfg[1]}; K/V MiB of the 256-cell load context, each test has its own): {ln}")
        return engine

    def _open(cfg):
        return open_model(spec.model, ctk=cfg[0], ctv=cfg[1], flash_attn=cfg[2], n_ctx=256, n_batch=256,
                          n_threads=spec.n_threads, n_gpu_layers=spec.n_gpu_layers, kv_plan=axis_plan(spec.model, cfg[3]),
                          rotation=spec.rotation, k_center=spec.k_center, offload=spec.offload, fit_ctx=most_cells(spec))

    def facts_of(engine) -> dict:
        # the K centering this configuration runs with (auto resolved for its K types) and the rotation;
        # where it ran: the devices holding layers and the split
        devices = [p.device for p in engine.placement if p.layers and p.device != "CPU"]
        return {**model_facts(engine), "k_center": str(engine.k_center), "attn_rotation": spec.rotation,
                "devices": ",".join(devices) or "CPU", "split_mode": spec.offload.split_mode if spec.offload else "layer",
                "offload": str(where_key(spec))}

    roof: dict = {}

    def bandwidth(device: str) -> tuple[float, str] | None:
        if device not in roof:
            from ..engine import EngineError

            try:
                roof[device] = device_bandwidth(spec, device, engine.n_threads, log)
            except EngineError as e:  # e.g. no room for 2 GiB beside a large model: the column shows "-"
                roof[device] = None
                if log:
                    log(f"copy bandwidth not measured ({e}); give it with --bandwidth GB/s for the % BW column")
        return roof[device]

    def roofline_of(engine) -> tuple[dict, Callable[[str], tuple[float, str]]]:
        if "model" not in roof:
            import llama_cpp

            from ..cachetypes import all_types
            from ..kvplan import model_layers, tensor_bytes

            sizes = {ti.id: (ti.block_size, ti.type_size) for ti in all_types().values()}
            roof["model"] = {"layers": model_layers(spec.model), "tensors": tensor_bytes(spec.model, sizes),
                             "n_swa": int(llama_cpp.llama_model_n_swa(engine.llama.model))}
        return roof["model"], bandwidth

    def named(cfg) -> str:
        return f"{cfg[0]}/{cfg[1]} fa {cfg[2]}" + (f" {plan_label(cfg[3])}" if cfg[3] != NO_PLAN else "")

    # phase 1: llama-bench's tests, configuration by configuration (one model load each)
    by_cfg: dict[tuple[str, str, str, tuple[str, str, str]], list[Test]] = {}
    for t in spec.tests:
        by_cfg.setdefault((t.ctk, t.ctv, t.fa, t.plan), []).append(t)
    for cfg, tests in by_cfg.items():
        keys = [test_key(spec, model_sha, t) for t in tests]
        if all(k in done for k in keys):
            for k in keys:
                emit(k, None, True)
            continue
        engine = opened(cfg)
        try:
            facts = facts_of(engine)
            cache = _DepthState()
            for i, (t, k) in enumerate(zip(tests, keys)):
                if k in done:
                    emit(k, None, True)
                    continue
                if log:
                    log(f"{named(cfg)}: {t.name}")
                emit(k, _run_test(spec, engine, t, facts, cache, spec.seed + i, roofline_of(engine)), False)
        finally:
            engine.close()
    # phase 2: llama-batched-bench's table for every configuration
    if spec.batched:
        cases = spec.batched.cases()
        for cfg in spec.configs:
            bkeys = dict(zip(cases, (batched_key(spec, model_sha, cfg, c) for c in cases)))
            todo = {c for c in cases if bkeys[c] not in done}
            if todo:
                if log:
                    log(f"{named(cfg)}: batched, {len(todo)} cases, n_ctx {spec.batched.n_ctx}")
                engine = opened(cfg)
                try:
                    run_batched(spec, engine, cfg, facts_of(engine), todo, spec.seed,
                                lambda c, row: emit(bkeys[c], row, row is None))
                finally:
                    engine.close()
            else:
                for c in cases:
                    emit(bkeys[c], None, True)
    return rows
