"""Speed of K/V cache types through the engine: llama-bench's and llama-batched-bench's
measurements, run in-process on the patched ``llama_cpp``.

Method (read from the pinned llama.cpp, ``tools/llama-bench/llama-bench.cpp`` and
``tools/batched-bench/batched-bench.cpp``; the code here is ours):

- **Tests** (llama-bench): comma lists expand to every combination in llama-bench's order —
  K type, V type, flash attention, depth, then the pp tests (``-p``), then the tg tests
  (``-n``). A test is ``ppP`` (decode P prompt tokens in batches of n_batch, synchronize
  once at the end), or ``tgN`` (N single-token decodes, synchronizing after each), both
  optionally ``@ dD``: D tokens are prefilled untimed before each repetition. Tokens are
  random ids (the first one BOS when the vocabulary adds it), as llama-bench's.
- Each test gets its own context of n_ctx = P + N + D cells (n_batch, n_ubatch as given,
  ``swa_full`` off) on the model loaded once per K/V configuration. Warmup (unless off):
  one full pp run, or one generated token. Each repetition clears the KV memory, restores
  the depth prefix (prefilled once per configuration and depth, then restored from the
  saved sequence state, as llama-bench does), and times the test with a monotonic clock.
  t/s of a repetition = tokens / seconds; the reported value is the mean ± sample standard
  deviation over repetitions of those rates (llama-bench's ``avg_ts``/``stddev_ts``).
- **Batched** (llama-batched-bench, default mode: prompt not shared, generation
  interleaved): one context with n_seq_max = max(npl) and n_ctx = max(pl × (pp + tg)),
  non-unified KV; warmup of 16 tokens; per (pp, tg, pl): clear the memory, decode pl
  prompts of pp tokens (in n_batch slices; one synchronize), then tg steps of pl tokens
  (one per sequence, synchronizing after each). S_PP = pl·pp / T_PP, S_TG = pl·tg / T_TG,
  S = (pl·pp + pl·tg) / (T_PP + T_TG).

Results go to ``results.jsonl`` in the output directory as each test finishes (field names
as llama-bench's / llama-batched-bench's jsonl); a rerun with the same settings skips the
tests already there. :func:`markdown`, :func:`csv_text`, :func:`plot` format them.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import random
import statistics
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .cachetypes import FLASH_ATTN_RULE, check_cache_type, flash_attn_conflict
from .values import parse_k_center
from .fsutil import sha256_file_cached
from .kcenter import resolve_auto
from .kvplan import build_plan, plan_label
from .shapes import SPEED_ONLY_KEY, SPEED_ONLY_NAME

#: ``-fa`` values accepted per item, as llama-bench's (on|off|auto and 1|0).
FA_VALUES = {"on": "on", "1": "on", "off": "off", "0": "off", "auto": "auto"}
#: the number of warmup tokens llama-batched-bench decodes before its table.
BATCHED_WARMUP_TOKENS = 16


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

    from .engine import ensure_engine

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


def validate(spec: BenchSpec) -> None:
    """Every check that can fail before a run, so a bad list fails at once, not after hours.

    Raises BenchError for: no tests at all, reps < 1, n_batch/n_ubatch < 1, an output
    directory holding another model's results, a test or
    batched case that needs more positions than the model's n_ctx_train (unless
    ``spec.beyond_train``), more parallel
    sequences than llama.cpp allows; ValueError for -fa off with a quantized V (also one a
    layer plan gives); KVPlanError (a ValueError) for a plan that does not fit the model;
    GPUOffloadError (an EngineError) for -ngl on an engine without a usable GPU backend;
    EngineNotBuiltError when the engine is missing.
    """
    from .engine import check_gpu_offload, ensure_engine

    if not spec.tests and spec.batched is None:
        raise BenchError("nothing to run: -p and -n are all 0 and --batched is off")
    if spec.reps < 1:
        raise BenchError(f"-r {spec.reps}: repetitions must be >= 1")
    if spec.n_batch < 1 or spec.n_ubatch < 1:
        raise BenchError(f"-b {spec.n_batch} -ub {spec.n_ubatch}: batch sizes must be >= 1")
    for k, v, f, _ in spec.configs:
        if flash_attn_conflict(f, v):
            raise BenchError(f"-fa off with -ctv {v} (K {k}): {FLASH_ATTN_RULE}")
    if not spec.model.is_file():
        raise BenchError(f"model file not found: {spec.model}")
    model_sha = sha256_file_cached(spec.model)
    others = sorted({r.get("model_filename", "?") for r in load_results(spec.results).values()
                     if r.get("model_sha256") not in (None, model_sha)})
    if others:
        raise BenchError(f"{spec.results} holds results of another model ({', '.join(others)}); one directory "
                         "is one model's table and plot: give another --dir")
    for k, v, f, pl in spec.configs:  # each plan checked against the model before anything runs
        built = _build_plan(spec.model, pl)
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


def _most_cells(spec: BenchSpec) -> int:
    """The largest context any test or batched case of ``spec`` creates (what -ngl auto must fit)."""
    most = max((t.n_ctx for t in spec.tests), default=256)
    return max(most, spec.batched.n_ctx if spec.batched is not None else 0)


def _build_plan(model: Path, plan: tuple[str, str, str]):
    """The KVPlan of an axis point for ``model`` (None for no plan); KVPlanError when it does not fit."""
    b, s, m = plan
    return build_plan(model, boundary=b or None, swa=s or None, plan=m or None) if plan != NO_PLAN else None


def _plan_fields(plan: tuple[str, str, str], engine) -> dict:
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
        p = _build_plan(model, plan)
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


def _append(path: Path, row: dict) -> None:
    """One line more in results.jsonl; a last line cut by a kill (no newline) is ended first,
    so the new row stays a line of its own."""
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write((json.dumps(row) + "\n").encode())
        f.flush()


# ---------------------------------------------------------------- the roofline

def kv_bytes_per_cell(cache, layers, row_bytes) -> int:
    """Bytes one cell (token) takes in the layers of one KV cache (tqgguf.runtime.KVCacheInfo):
    the engine's plan line for it when a layer plan applies, else n_layers x (a K row of
    n_head_kv x head_k values + a V row of n_head_kv x head_v values of its types);
    ``layers`` is tqgguf.kvplan.ModelLayers, ``row_bytes(type, n) -> bytes`` ggml_row_size."""
    if cache.plan_bytes_per_token is not None:
        return cache.plan_bytes_per_token
    return cache.n_layers * (row_bytes(cache.k_type, layers.n_head_kv * layers.head_k)
                             + row_bytes(cache.v_type, layers.n_head_kv * layers.head_v))


def kv_read_bytes(per_cell: list[tuple[int, bool]], n_depth: int, n_gen: int, n_swa: int = 0) -> float:
    """KV bytes attention reads per generated token of a ``tgN @ dD`` test, averaged over its
    N tokens: the token at position p (D <= p < D + N) reads the p + 1 cells in use (itself
    included) of every full-attention cache and min(p + 1, n_swa) of a sliding-window one;
    ``per_cell``: (bytes per cell of the cache's layers, is a window cache) per cache. The
    cells that hold a token, not the padded range llama.cpp's kernels may step over
    (n_kv rounded up to 256): the bytes a decode cannot avoid reading."""
    if n_gen < 1:
        return 0.0
    total = 0
    for p in range(n_depth, n_depth + n_gen):
        total += sum(b * (min(p + 1, n_swa) if swa and n_swa else p + 1) for b, swa in per_cell)
    return total / n_gen


def weight_read_bytes(tensors: dict[str, int]) -> int:
    """Weight bytes one decoded token reads: every tensor of the model file
    (tqgguf.kvplan.tensor_bytes) but the token embeddings, of which a token gathers one row
    — unless there is no ``output.weight``: then llama.cpp's output layer is the embedding
    matrix (tied embeddings, e.g. SmolLM2, Llama-3.2-1B, Gemma-3), read whole for the logits."""
    embd = tensors.get("token_embd.weight", 0)
    return sum(tensors.values()) - (embd if "output.weight" in tensors else 0)


def weights_on(spec: BenchSpec, n_layer: int) -> str | None:
    """Where a decode reads the weights: "cpu" (-ngl 0), "gpu" (-ngl -1 or at least the
    n_layer repeating layers + the output layer), None when they are split (no one device's
    bandwidth bounds the decode)."""
    ngl = spec.n_gpu_layers
    if ngl == 0:
        return "cpu"
    return "gpu" if ngl < 0 or ngl >= n_layer + 1 else None


#: where :func:`device_bandwidth` keeps the figures it measured, in the results directory
BANDWIDTH_FILE = "bandwidth.json"


def device_bandwidth(spec: BenchSpec, device: str, n_threads: int, log: Callable[[str], None] | None = None
                     ) -> tuple[float, str]:
    """The bandwidth (bytes/s) the roofline column divides by, and its source for the column
    header: ``spec.bandwidth`` ("given"), else the copy bandwidth tqgguf.engine.copy_bandwidth
    measures through the engine's ggml backend on ``device`` ("gpu": the first GPU, 1 GiB;
    "cpu": ``n_threads`` threads, 256 MiB) — measured once per device (and thread count) and
    kept in ``<out_dir>/bandwidth.json``, so every run in a directory divides by the same
    figure. Raises EngineError when it cannot be measured."""
    if spec.bandwidth:
        return spec.bandwidth, "given"
    from .engine import copy_bandwidth

    path = spec.out_dir / BANDWIDTH_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    key = "gpu" if device == "gpu" else f"cpu, {n_threads} threads"
    if not isinstance(known, dict) or not isinstance(known.get(key), dict):
        known = known if isinstance(known, dict) else {}
        nbytes = 1 << 30 if device == "gpu" else 256 << 20
        bps, desc = copy_bandwidth(gpu=device == "gpu", n_threads=n_threads, nbytes=nbytes)
        known[key] = {"bytes_per_s": bps, "device": desc, "method": f"ggml GGML_OP_CPY of 2 x {nbytes >> 20} MiB "
                      "f32, fastest of 10, bytes read + written", "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1) + "\n")
        if log:
            log(f"copy bandwidth of {desc} ({key}): {bps / 1e9:.1f} GB/s, kept in {path}")
    return float(known[key]["bytes_per_s"]), "measured"


def roofline_fields(spec: BenchSpec, t: Test, report, model_facts: dict, avg_ts: float,
                    bandwidth: Callable[[str], tuple[float, str] | None] | None) -> dict:
    """The roofline fields of a tg row (none for a pp row): kv_read_bytes and
    weight_read_bytes per token; with the weights on one device, also bandwidth_bytes_per_s,
    bandwidth_source (measured | given) and bandwidth_fraction = (KV + weight bytes per token)
    x t/s / bandwidth. ``model_facts``: {"layers": ModelLayers, "tensors": tensor bytes,
    "n_swa": the window}; ``bandwidth(device)`` gives (bytes/s, source), or None when it could
    not be measured (then no fraction)."""
    if not t.n_gen:
        return {}
    from .cachetypes import type_info

    layers = model_facts["layers"]
    per_cell = [(kv_bytes_per_cell(c, layers, lambda ty, n: type_info(ty).row_bytes(n)), c.swa) for c in report.caches]
    kv = kv_read_bytes(per_cell, t.n_depth, t.n_gen, model_facts["n_swa"])
    w = weight_read_bytes(model_facts["tensors"])
    out = {"kv_read_bytes": kv, "weight_read_bytes": w}
    device = weights_on(spec, layers.n_layer)
    measured = bandwidth(device) if device and bandwidth else None
    if measured:
        bps, source = measured
        out |= {"bandwidth_bytes_per_s": bps, "bandwidth_source": source, "bandwidth_fraction": (kv + w) * avg_ts / bps}
    return out


# ---------------------------------------------------------------- the engine loops

class _Decoder:
    """Token decoding on one context with the low-level API; what it counts is checked."""

    def __init__(self, ctx, vocab_n: int, add_bos: bool, bos: int, seed: int) -> None:
        import llama_cpp

        self.lc = llama_cpp
        self.ctx = ctx
        self.n_vocab = vocab_n
        self.add_bos = add_bos
        self.bos = bos
        self.rng = random.Random(seed)
        self.mem = llama_cpp.llama_get_memory(ctx)

    def _decode(self, batch) -> None:
        res = self.lc.llama_decode(self.ctx, batch)
        if res != 0:
            raise RuntimeError(f"llama_decode failed (returned {res})")

    def pos_max(self, seq: int = 0) -> int:
        return self.lc.llama_memory_seq_pos_max(self.mem, seq)

    def clear(self) -> None:
        self.lc.llama_memory_clear(self.mem, False)

    def tokens(self, n: int, *, first_bos: bool = True):
        """n random token ids as a ctypes array, the first BOS when the vocabulary adds it
        (llama-bench's choice), made before the timed region."""
        toks = (ctypes.c_int32 * n)(*[self.rng.randrange(self.n_vocab) for _ in range(n)])
        if first_bos and self.add_bos and n:
            toks[0] = self.bos
        return toks

    def prompt(self, toks, n_batch: int) -> int:
        """llama-bench's prompt run: the tokens ``toks`` (from :meth:`tokens`) decoded after
        what seq 0 holds, n_batch at a time (positions follow seq 0, the last token of each
        batch outputs), one synchronize at the end. Returns the tokens decoded."""
        n_prompt, base, done = len(toks), ctypes.addressof(toks), 0
        while done < n_prompt:
            n = min(n_prompt - done, n_batch)
            self._decode(self.lc.llama_batch_get_one(ctypes.cast(base + 4 * done, ctypes.POINTER(ctypes.c_int32)), n))
            done += n
        self.lc.llama_synchronize(self.ctx)
        return done

    def gen(self, toks) -> int:
        """llama-bench's generation run: one decode per token of ``toks`` (from
        :meth:`tokens`: BOS first when the vocabulary adds it, then random ids) after what
        seq 0 holds, synchronizing after each. Returns the tokens decoded."""
        tok = ctypes.c_int32()
        ptr = ctypes.pointer(tok)
        for t in toks:
            tok.value = t
            self._decode(self.lc.llama_batch_get_one(ptr, 1))
            self.lc.llama_synchronize(self.ctx)
        return len(toks)


def _model_facts(engine) -> dict:
    import llama_cpp

    from .engine import bench_backend

    m = engine.llama.model
    buf = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(m, buf, ctypes.sizeof(buf))
    facts = {"model_type": buf.value.decode(), "model_size": int(llama_cpp.llama_model_size(m)),
             "model_n_params": int(llama_cpp.llama_model_n_params(m)), "backends": bench_backend()}
    n = llama_cpp.llama_model_meta_val_str(m, SPEED_ONLY_KEY.encode(), buf, ctypes.sizeof(buf))
    if n >= 0 and buf.value.decode().lower() == "true":  # a tqgguf.shapes file: random weights
        facts["speed_only"] = True
    return facts


def _vocab(engine) -> tuple[int, bool, int]:
    import llama_cpp

    v = llama_cpp.llama_model_get_vocab(engine.llama.model)
    return (llama_cpp.llama_vocab_n_tokens(v), bool(llama_cpp.llama_vocab_get_add_bos(v)),
            llama_cpp.llama_vocab_bos(v))


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

    from .engine import cpu_threadpool
    from .runtime import open_context

    # llama-bench's setup: one context and one CPU threadpool per test
    with closing(open_context(engine, n_ctx=t.n_ctx, n_batch=spec.n_batch, n_ubatch=spec.n_ubatch)) as ctx, \
            cpu_threadpool(ctx.ctx, engine.n_threads):
        dec = _Decoder(ctx.ctx, *_vocab(engine), seed=seed)
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
            **_plan_fields(t.plan, engine),
            **(roofline_fields(spec, t, report, roofline[0], avg_ts, roofline[1]) if roofline else {})}


class _SeqBatch:
    """A llama_batch over buffers we own, for many sequences (batched bench)."""

    def __init__(self, capacity: int) -> None:
        import llama_cpp

        self.lc = llama_cpp
        self.token = (ctypes.c_int32 * capacity)()
        self.pos = (ctypes.c_int32 * capacity)()
        self.n_seq_id = (ctypes.c_int32 * capacity)(*([1] * capacity))
        self.seq_vals = (ctypes.c_int32 * capacity)()
        base = ctypes.addressof(self.seq_vals)  # entry i's seq_id array (of one) is seq_vals[i]
        self.seq_addr = (ctypes.c_size_t * capacity)(*range(base, base + 4 * capacity, 4))
        self.logits = (ctypes.c_int8 * capacity)()
        self.n = 0

    def fill(self, tokens: list[int], pos: list[int], seq: list[int], out: list[int]) -> None:
        n = len(tokens)
        self.token[:n], self.pos[:n], self.seq_vals[:n], self.logits[:n] = tokens, pos, seq, out
        self.n = n

    def view(self, off: int, n: int):
        """llama_batch of entries [off, off + n)."""
        def at(arr, typ):
            return ctypes.cast(ctypes.addressof(arr) + ctypes.sizeof(typ) * off, ctypes.POINTER(typ))
        return self.lc.llama_batch(n_tokens=n, token=at(self.token, ctypes.c_int32), embd=None,
                                   pos=at(self.pos, ctypes.c_int32), n_seq_id=at(self.n_seq_id, ctypes.c_int32),
                                   seq_id=at(self.seq_addr, ctypes.POINTER(ctypes.c_int32)),
                                   logits=at(self.logits, ctypes.c_int8))


def _run_batched(spec: BenchSpec, engine, cfg, facts: dict, todo: set[tuple[int, int, int]], seed: int,
                 on_row: Callable[[tuple[int, int, int], dict | None], None]) -> None:
    import llama_cpp

    from .engine import cpu_threadpool
    from .runtime import open_context

    b = spec.batched
    n_seq = max(b.npl)
    # as llama-batched-bench (common's threadpools): one context and one CPU threadpool
    with closing(open_context(engine, n_ctx=b.n_ctx, n_batch=spec.n_batch, n_ubatch=spec.n_ubatch,
                              n_seq_max=n_seq)) as ctx, cpu_threadpool(ctx.ctx, engine.n_threads):
        n_vocab, _, _ = _vocab(engine)
        rng = random.Random(seed)
        mem = llama_cpp.llama_get_memory(ctx.ctx)
        cap = max(max(pl * pp for pp, _, pl in b.cases()), n_seq, BATCHED_WARMUP_TOKENS)
        batch = _SeqBatch(cap)

        n_batch = llama_cpp.llama_n_batch(ctx.ctx)  # llama.cpp caps n_batch at n_ctx; a larger batch aborts

        def decode_all(sync_each: bool) -> None:
            for off in range(0, batch.n, n_batch):
                n = min(n_batch, batch.n - off)
                res = llama_cpp.llama_decode(ctx.ctx, batch.view(off, n))
                if res != 0:
                    raise RuntimeError(f"llama_decode failed (returned {res}) in the batched bench")
                if sync_each:
                    llama_cpp.llama_synchronize(ctx.ctx)

        w = min(BATCHED_WARMUP_TOKENS, n_batch, b.n_ctx)  # a context of fewer cells (-npl 1 -npp 8 -ntg 2) takes fewer
        batch.fill([rng.randrange(n_vocab) for _ in range(w)], list(range(w)), [0] * w, [0] * w)
        decode_all(True)
        for pp, tg, pl in b.cases():
            if (pp, tg, pl) not in todo:
                on_row((pp, tg, pl), None)  # measured before: reuse it, in its place
                continue
            batch.fill([rng.randrange(n_vocab) for _ in range(pl * pp)], [i for _ in range(pl) for i in range(pp)],
                       [j for j in range(pl) for _ in range(pp)], [int(i == pp - 1) for _ in range(pl) for i in range(pp)])
            steps = [[rng.randrange(n_vocab) for _ in range(pl)] for _ in range(tg)]
            seqs, outs = list(range(pl)), [1] * pl
            llama_cpp.llama_memory_clear(mem, False)
            t0 = time.perf_counter_ns()
            decode_all(False)
            llama_cpp.llama_synchronize(ctx.ctx)
            t1 = time.perf_counter_ns()
            for i in range(tg):
                batch.fill(steps[i], [pp + i] * pl, seqs, outs)
                decode_all(True)
            t2 = time.perf_counter_ns()
            kv = [llama_cpp.llama_memory_seq_pos_max(mem, j) + 1 for j in range(pl)]
            t_pp, t_tg = (t1 - t0) / 1e9, (t2 - t1) / 1e9
            on_row((pp, tg, pl), {
                **facts, "kind": "batched", "type_k": cfg[0], "type_v": cfg[1], "fa_asked": cfg[2],
                "flash_attn": int(engine.flash_attn), "n_kv_max": b.n_ctx, "n_batch": spec.n_batch,
                "n_ubatch": min(spec.n_ubatch, spec.n_batch), "is_pp_shared": 0, "n_gpu_layers": engine.n_gpu_layers,
                "n_threads": engine.n_threads, "pp": pp, "tg": tg, "pl": pl, "n_kv": pl * (pp + tg),
                "t_pp": t_pp, "speed_pp": pl * pp / t_pp, "t_tg": t_tg, "speed_tg": pl * tg / t_tg,
                "t": t_pp + t_tg, "speed": (pl * pp + pl * tg) / (t_pp + t_tg),
                "kv_tokens_per_seq": kv, "k_mib": ctx.report.k_mib, "v_mib": ctx.report.v_mib,
                "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **_plan_fields(cfg[3], engine)})


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
    from .builder import installed_build_info
    from .runtime import open_model

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
            _append(spec.results, row)
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
                          n_threads=spec.n_threads, n_gpu_layers=spec.n_gpu_layers, kv_plan=_build_plan(spec.model, cfg[3]),
                          rotation=spec.rotation, k_center=spec.k_center, offload=spec.offload, fit_ctx=_most_cells(spec))

    def facts_of(engine) -> dict:
        # the K centering this configuration runs with (auto resolved for its K types) and the rotation;
        # where it ran: the devices holding layers and the split
        devices = [p.device for p in engine.placement if p.layers and p.device != "CPU"]
        return {**_model_facts(engine), "k_center": str(engine.k_center), "attn_rotation": spec.rotation,
                "devices": ",".join(devices) or "CPU", "split_mode": spec.offload.split_mode if spec.offload else "layer",
                "offload": str(where_key(spec))}

    roof: dict = {}

    def bandwidth(device: str) -> tuple[float, str] | None:
        if device not in roof:
            from .engine import EngineError

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

            from .cachetypes import all_types
            from .kvplan import model_layers, tensor_bytes

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
                    _run_batched(spec, engine, cfg, facts_of(engine), todo, spec.seed,
                                 lambda c, row: emit(bkeys[c], row, row is None))
                finally:
                    engine.close()
            else:
                for c in cases:
                    emit(bkeys[c], None, True)
    return rows


# ---------------------------------------------------------------- output

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
