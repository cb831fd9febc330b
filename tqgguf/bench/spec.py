"""What a bench run is: the lists of the command line and their expansion into llama-bench's
tests, the batched lists, the whole :class:`BenchSpec` and the checks before a run
(:func:`validate`); what makes two results the same measurement (:func:`test_key`,
:func:`batched_key`) and the ``results.jsonl`` file that keeps them (:func:`load_results`,
:func:`append_row`). The method is in :mod:`tqgguf.bench`.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..cachetypes import FLASH_ATTN_RULE, check_cache_type, flash_attn_conflict
from ..fsutil import sha256_file_cached
from ..kcenter import resolve_auto
from ..kvplan import build_plan, plan_label
from ..values import parse_k_center

#: ``-fa`` values accepted per item, as llama-bench's (on|off|auto and 1|0).
FA_VALUES = {"on": "on", "1": "on", "off": "off", "0": "off", "auto": "auto"}


class BenchError(ValueError):
    """Bad bench input (unknown type, impossible size, ...); the message says what is allowed."""


# ---------------------------------------------------------------- parsing and expansion

def parse_int_list(value: str | Iterable[int], flag: str, *, minimum: int) -> list[int]:
    """A comma list of integers >= ``minimum`` (duplicates dropped, order kept).

    Raises BenchError naming the flag and the bad item."""
    items = value if not isinstance(value, str) else [s.strip() for s in value.split(",")]
    out = []
    for item in items:
        try:
            v = int(item)
        except (TypeError, ValueError):
            raise BenchError(f"{flag}: {item!r} is not an integer; give a comma list like 0,512") from None
        if v < minimum:
            raise BenchError(f"{flag}: {v} is not allowed; values must be >= {minimum}")
        out.append(v)
    if not out:
        raise BenchError(f"{flag}: empty list")
    return list(dict.fromkeys(out))


def parse_type_list(value: str, flag: str) -> list[str]:
    """A comma list of KV cache type names (CacheTypeError, a ValueError, names the bad one)."""
    items = [s.strip() for s in str(value).split(",")]
    if any(not s for s in items):
        raise BenchError(f"{flag}: empty item in {value!r}; give comma-separated type names")
    return list(dict.fromkeys(check_cache_type(s, f"cache type in {flag}") for s in items))


def parse_fa_list(value: str) -> list[str]:
    """A comma list of flash attention modes: on|off|auto (1|0 as llama-bench's), each
    measurement once: auto is on with every backend tqgguf builds
    (tqgguf.runtime.resolve_flash_attn), so of on and auto the first given is kept."""
    out: dict[str, str] = {}  # what runs -> what was asked
    for item in str(value).split(","):
        item = item.strip().lower()
        if item not in FA_VALUES:
            raise BenchError(f"-fa: {item!r} is not allowed; use on, off, auto (or 1, 0), comma-separated")
        out.setdefault("on" if FA_VALUES[item] == "auto" else FA_VALUES[item], FA_VALUES[item])
    return list(out.values())


#: the layer-plan axis point "no plan" (tqgguf.kvplan.parse_plan_axes)
NO_PLAN = ("", "", "")


@dataclass(frozen=True)
class Test:
    """One llama-bench test: K/V types, flash attention mode (on|off|auto as asked),
    n_prompt or n_gen tokens (one of them 0), n_depth tokens prefilled before it, and the
    layer plan (boundary, swa, map) as :func:`tqgguf.kvplan.parse_plan_axes` gives it
    (all "" = none: every layer at ctk/ctv)."""

    ctk: str
    ctv: str
    fa: str
    n_prompt: int
    n_gen: int
    n_depth: int
    plan: tuple[str, str, str] = NO_PLAN

    @property
    def name(self) -> str:
        """llama-bench's test column: pp512, tg128, pp512 @ d8192."""
        s = f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}"
        return s + (f" @ d{self.n_depth}" if self.n_depth else "")

    @property
    def n_ctx(self) -> int:
        return self.n_prompt + self.n_gen + self.n_depth


def expand(ctk: list[str], ctv: list[str], fa: list[str], n_prompt: list[int], n_gen: list[int],
           n_depth: list[int], plans: list[tuple[str, str, str]] = (NO_PLAN,)) -> list[Test]:
    """Every combination in llama-bench's order (K, V, fa, layer plan, depth; pp tests, then
    tg tests); a 0 in -p or -n makes no test, as in llama-bench."""
    return [Test(k, v, f, p, 0, d, pl) if p else Test(k, v, f, 0, n, d, pl)
            for k in ctk for v in ctv for f in fa for pl in plans for d in n_depth
            for p, n in [(p, 0) for p in n_prompt if p] + [(0, n) for n in n_gen if n]]


@dataclass(frozen=True)
class BatchedSpec:
    """llama-batched-bench's lists: prompt tokens per sequence (npp), generated tokens per
    sequence (ntg), parallel sequences (npl)."""

    npp: tuple[int, ...]
    ntg: tuple[int, ...]
    npl: tuple[int, ...]

    @property
    def n_ctx(self) -> int:
        """Cells the context needs: the largest pl × (pp + tg)."""
        return max(pl * (pp + tg) for pp in self.npp for tg in self.ntg for pl in self.npl)

    def cases(self) -> list[tuple[int, int, int]]:
        return [(pp, tg, pl) for pp in self.npp for tg in self.ntg for pl in self.npl]


@dataclass
class BenchSpec:
    """Everything a run needs. model: GGUF path; tests: from :func:`expand`; reps: timed
    repetitions per test; batched: None or the batched lists (run for every K/V/fa
    configuration of ``configs``); out_dir: where results.jsonl, table.md, bench.png go."""

    model: Path
    tests: list[Test]
    configs: list[tuple[str, str, str, tuple[str, str, str]]]  # (ctk, ctv, fa, plan), configs_of
    reps: int = 5
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int | None = None
    n_gpu_layers: int = 0
    offload: object = None  # tqgguf.devices.Offload (-ngl, --rpc, -sm, -ts, -mg, -dev); None: n_gpu_layers alone
    warmup: bool = True
    batched: BatchedSpec | None = None
    out_dir: Path = Path("bench")
    seed: int = 0
    beyond_train: bool = False  # allow depth + tokens > n_ctx_train (speed only; llama-bench never checks)
    k_center: str = "off"  # the --k-center setting (tqgguf.kcenter), resolved per configuration by open_model
    rotation: bool = True  # the Hadamard rotation of K/V (--rot/--no-rot)
    bandwidth: float | None = None  # --bandwidth: the device's bandwidth in bytes/s, instead of measuring it

    @property
    def results(self) -> Path:
        return self.out_dir / "results.jsonl"


def configs_of(ctk: list[str], ctv: list[str], fa: list[str],
               plans: list[tuple[str, str, str]] = (NO_PLAN,)) -> list[tuple[str, str, str, tuple[str, str, str]]]:
    """Every (ctk, ctv, fa, plan) configuration, in :func:`expand`'s order (one model load each)."""
    return [(k, v, f, pl) for k in ctk for v in ctv for f in fa for pl in plans]


def n_ctx_train(model: Path) -> int:
    """The model's training context: GGUF ``<general.architecture>.context_length``, read by
    llama.cpp with the vocabulary only loaded (no weights; gguf-py's reader takes seconds
    on the vocabulary arrays). Raises BenchError when llama.cpp cannot read the file or the
    key is missing."""
    import llama_cpp

    from ..engine import ensure_engine

    ensure_engine()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    m = llama_cpp.llama_model_load_from_file(str(model).encode(), params)
    if not m:
        raise BenchError(f"llama.cpp cannot read {model} (not a GGUF model, or truncated)")
    try:
        buf = ctypes.create_string_buffer(256)
        vals = []
        for key in (b"general.architecture", None):
            if key is None:
                key = vals[0].encode() + b".context_length"
            if llama_cpp.llama_model_meta_val_str(m, key, buf, ctypes.sizeof(buf)) < 0:
                raise BenchError(f"{model} has no {key.decode()} in its GGUF metadata")
            vals.append(buf.value.decode())
        return int(vals[1])
    finally:
        llama_cpp.llama_model_free(m)


def validate(spec: BenchSpec, fa_from: str = "-fa", v_from: str = "-ctv") -> None:
    """Every check that can fail before a run, so a bad list fails at once, not after hours.
    ``fa_from`` / ``v_from``: where the flash attention modes and the V types came from, for the
    message of a conflict between them (the CLI names a TQGGUF_*/OLLAMA_* variable when no flag gave them).

    Raises BenchError for: no tests at all, reps < 1, n_batch/n_ubatch < 1, an output
    directory holding another model's results, a test or
    batched case that needs more positions than the model's n_ctx_train (unless
    ``spec.beyond_train``), more parallel
    sequences than llama.cpp allows; ValueError for -fa off with a quantized V (also one a
    layer plan gives); KVPlanError (a ValueError) for a plan that does not fit the model;
    GPUOffloadError (an EngineError) for -ngl on an engine without a usable GPU backend;
    EngineNotBuiltError when the engine is missing.
    """
    from ..engine import check_gpu_offload, ensure_engine

    if not spec.tests and spec.batched is None:
        raise BenchError("nothing to run: -p and -n are all 0 and --batched is off")
    if spec.reps < 1:
        raise BenchError(f"-r {spec.reps}: repetitions must be >= 1")
    if spec.n_batch < 1 or spec.n_ubatch < 1:
        raise BenchError(f"-b {spec.n_batch} -ub {spec.n_ubatch}: batch sizes must be >= 1")
    for k, v, f, _ in spec.configs:
        if flash_attn_conflict(f, v):
            raise BenchError(f"flash attention {f} (from {fa_from}) with the V cache type {v} (from {v_from}), "
                             f"K {k}: {FLASH_ATTN_RULE}")
    if not spec.model.is_file():
        raise BenchError(f"model file not found: {spec.model}")
    model_sha = sha256_file_cached(spec.model)
    others = sorted({r.get("model_filename", "?") for r in load_results(spec.results).values()
                     if r.get("model_sha256") not in (None, model_sha)})
    if others:
        raise BenchError(f"{spec.results} holds results of another model ({', '.join(others)}); one directory "
                         "is one model's table and plot: give another --dir")
    for k, v, f, pl in spec.configs:  # each plan checked against the model before anything runs
        built = axis_plan(spec.model, pl)
        for pv in sorted(built.v_types(v)) if built else ():
            if flash_attn_conflict(f, pv):
                raise BenchError(f"-fa off with {plan_label(pl)}, whose layers get the quantized V type {pv}: "
                                 f"{FLASH_ATTN_RULE}")
    train = n_ctx_train(spec.model) if not spec.beyond_train else 1 << 62
    for t in spec.tests:
        if t.n_ctx > train:
            raise BenchError(f"test {t.name} needs {t.n_ctx} positions (depth + tokens), more than the model's "
                             f"context n_ctx_train = {train}; use -d/-p/-n with depth + tokens <= {train}, or "
                             "--beyond-n-ctx-train to time it anyway (speed only: the model's outputs past its "
                             "training context mean nothing)")
    if spec.batched is not None:
        import llama_cpp

        b = spec.batched
        if max(b.npp) + max(b.ntg) > train:
            raise BenchError(f"--batched: -npp {max(b.npp)} + -ntg {max(b.ntg)} positions per sequence exceed the "
                             f"model's context n_ctx_train = {train} (--beyond-n-ctx-train times it anyway)")
        ensure_engine()
        most = llama_cpp.llama_max_parallel_sequences()
        if max(b.npl) > most:
            raise BenchError(f"-npl {max(b.npl)}: llama.cpp holds at most {most} sequences in one context")
    ensure_engine()
    if spec.offload is not None:
        spec.offload.prepare()
    else:
        check_gpu_offload(spec.n_gpu_layers)


def where_key(spec: BenchSpec):
    """What a result was measured on, in its key: 0 for the CPU (the key every CPU result had
    before devices were recorded), else the offload's key (-ngl, workers, -sm, -ts, -dev)."""
    if spec.offload is None:
        return spec.n_gpu_layers
    k = spec.offload.key()
    return 0 if k == "cpu" else k


def most_cells(spec: BenchSpec) -> int:
    """The largest context any test or batched case of ``spec`` creates (what -ngl auto must fit)."""
    most = max((t.n_ctx for t in spec.tests), default=256)
    return max(most, spec.batched.n_ctx if spec.batched is not None else 0)


def axis_plan(model: Path, plan: tuple[str, str, str]):
    """The KVPlan of an axis point for ``model`` (None for no plan); KVPlanError when it does not fit."""
    b, s, m = plan
    return build_plan(model, boundary=b or None, swa=s or None, plan=m or None) if plan != NO_PLAN else None


def plan_fields(plan: tuple[str, str, str], engine) -> dict:
    """Row fields of a layer plan: the flags, the engine's map and effective bits/value ({} without one)."""
    if plan == NO_PLAN:
        return {}
    return {"kv_plan": plan_label(plan), "kv_plan_engine": engine.kv_plan.engine_value(),
            "bits_per_value": engine.report.bits_per_value}


# ---------------------------------------------------------------- identity and resume

def test_key(spec: BenchSpec, model_sha: str, t: Test) -> str:
    """What makes two results the same measurement (a rerun skips tests with a stored key).
    A layer plan is part of it only when there is one (results from before plans keep their keys)."""
    parts = dict(model=model_sha, ctk=t.ctk, ctv=t.ctv, fa=t.fa, p=t.n_prompt, n=t.n_gen, d=t.n_depth,
                 b=spec.n_batch, ub=spec.n_ubatch, t=spec.n_threads, ngl=where_key(spec), r=spec.reps,
                 warmup=spec.warmup)
    if t.plan != NO_PLAN:
        parts["plan"] = plan_label(t.plan)
    parts.update(_center_key(spec, t.ctk, t.plan))
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def resolved_k_center(spec: BenchSpec, ctk: str, plan: tuple[str, str, str] = NO_PLAN) -> str:
    """The K centering one configuration runs with: ``spec.k_center``, with auto resolved for
    this model and the K types in use as open_model resolves it (tqgguf.kcenter.resolve_auto).
    Raises KCenterError / KVPlanError (ValueErrors) for a bad mode or an unreadable model."""
    return _resolved_k_center(spec.model, spec.k_center, ctk, plan)


@functools.lru_cache(maxsize=256)
def _resolved_k_center(model: Path, setting: str, ctk: str, plan: tuple[str, str, str]) -> str:
    kc = parse_k_center(setting)
    if kc.mode == "auto":
        p = axis_plan(model, plan)
        kc, _ = resolve_auto(model, p.k_types(ctk) if p else {ctk})
    return str(kc)


def _center_key(spec: BenchSpec, ctk: str, plan: tuple[str, str, str]) -> dict:
    """K centering (resolved) and rotation in a result's key, only when they differ from what
    every result before them used (off, rotation on): older results, and auto where it means
    off, keep their keys; auto that means full on a biased model is another measurement."""
    kc = resolved_k_center(spec, ctk, plan)
    return ({"k_center": kc} if kc != "off" else {}) | ({"rot": False} if not spec.rotation else {})


def batched_key(spec: BenchSpec, model_sha: str, cfg: tuple[str, str, str, tuple[str, str, str]],
                case: tuple[int, int, int]) -> str:
    plan = [plan_label(cfg[3])] if cfg[3] != NO_PLAN else []
    parts = dict(model=model_sha, cfg=[*cfg[:3], *plan], case=case, b=spec.n_batch, ub=spec.n_ubatch,
                 t=spec.n_threads, ngl=where_key(spec), n_ctx=spec.batched.n_ctx, npl_max=max(spec.batched.npl),
                 **_center_key(spec, cfg[0], cfg[3]))
    return "batched-" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def load_results(path: Path) -> dict[str, dict]:
    """Rows of a results.jsonl by key (a line cut by a kill is skipped: that test reruns)."""
    done: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "key" in row:
                done[row["key"]] = row
    return done


def append_row(path: Path, row: dict) -> None:
    """One line more in results.jsonl; a last line cut by a kill (no newline) is ended first,
    so the new row stays a line of its own."""
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write((json.dumps(row) + "\n").encode())
        f.flush()
