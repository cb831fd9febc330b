"""Open a GGUF model in the patched engine with KV-cache types chosen by name.

Wraps ``llama_cpp.Llama``: cache types are mapped to ggml ids through the registry
(``tqgguf.cachetypes``), the Hadamard rotation is switched with upstream's
``LLAMA_ATTN_ROT_DISABLE`` (read when the KV cache is created), flash attention ``auto``
is resolved the way llama.cpp resolves it, and llama.cpp's own log is captured so the
caller learns what the engine really did (K/V types, MiB, rotation flags).
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .cachetypes import (FLASH_ATTN_MODES, FLASH_ATTN_RULE, check_cache_type, flash_attn_conflict, ggml_type_id,
                         type_info)
from .values import parse_k_center
from .devices import Offload, check_tensor_split, parse_placement, placement_lines
from .engine import EngineError, GPUOffloadError, capture, engine_env, ensure_engine
from . import kcenter
from .kvplan import KVPlan, bits_per_value, build_plan, kv_bytes_per_token, model_layers
from .enginevars import warn_overrides


@dataclass(frozen=True)
class KVCacheInfo:
    """One KV cache of a context as llama.cpp logged it (Gemma-3: a sliding-window and a
    global one; most models: one). swa: it is the sliding-window cache (llama-kv-cache-iswa's
    "creating SWA KV cache" came before it); cells, n_layers: its size (cells per sequence
    stream: per slot of llama-server) and layer count; k_type/v_type: its types ("mixed" under
    a layer plan); plan_bytes_per_token: the engine's plan line for it (bytes one token takes in
    its layers), None without a plan; k_mib/v_mib: the MiB it allocated for K and V (all its
    streams); n_seq: its sequence streams (0 when the line does not say); attn_rot_k/attn_rot_v:
    the rotation flags llama.cpp logged for it (None when not logged)."""

    swa: bool
    cells: int
    n_layers: int
    k_type: str
    v_type: str
    plan_bytes_per_token: int | None = None
    k_mib: float = 0.0
    v_mib: float = 0.0
    n_seq: int = 0
    attn_rot_k: bool | None = None
    attn_rot_v: bool | None = None


# llama-kv-cache.cpp: "size = 17.93 MiB (  1024 cells,  30 layers,  2/2 seqs), K (q8_0):   11.95 MiB, V (turbo4):
# 5.98 MiB", then "attn_rot_k = 1, ..." and "attn_rot_v = 1, ..." for that cache
_CACHE_LINE = re.compile(r"creating\s+(?P<kind>non-SWA|SWA) KV cache"
                         r"|size\s*=\s*[\d.]+ MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
                         r"(?:\s*\d+/(?P<seqs>\d+) seqs)?.*K \((?P<k>\w+)\):\s*(?P<kmib>[\d.]+) MiB,"
                         r"\s*V \((?P<v>\w+)\):\s*(?P<vmib>[\d.]+) MiB"
                         r"|kv_plan = .*?; (?P<plan>\d+) bytes per token"
                         r"|attn_rot_(?P<rot>[kv]) = (?P<on>\d)")


def _caches(log: str) -> list[KVCacheInfo]:
    out: list[KVCacheInfo] = []
    swa = False
    for m in _CACHE_LINE.finditer(log):
        if m.group("kind"):
            swa = m.group("kind") == "SWA"
        elif m.group("cells"):
            out.append(KVCacheInfo(swa, int(m.group("cells")), int(m.group("layers")), m.group("k"), m.group("v"),
                                   k_mib=float(m.group("kmib")), v_mib=float(m.group("vmib")),
                                   n_seq=int(m.group("seqs") or 0)))
            swa = False
        elif out and m.group("plan"):
            out[-1] = dataclasses.replace(out[-1], plan_bytes_per_token=int(m.group("plan")))
        elif out and m.group("rot"):
            out[-1] = dataclasses.replace(out[-1], **{f"attn_rot_{m.group('rot')}": m.group("on") == "1"})
    return out


@dataclass
class KVReport:
    """What llama.cpp reported when it created the context.

    k_type/v_type: ggml type names it used; k_mib/v_mib: KV buffer sizes it allocated
    (MiB, summed over all KV caches, e.g. SWA + full on Gemma-3; printed with 2 decimals);
    attn_rot_k/attn_rot_v: the Hadamard rotation flags; flash_attn: its resolved setting;
    n_ctx: context size it allocated; k_center: what the engine's K centering subtracts
    ("" = off; see tqgguf.kcenter) and k_center_active whether it subtracts anything;
    kv_plan: the LLAMA_KV_PLAN the engine applied ("" = none), kv_plan_layers its per-layer
    K/V types in runs ("0-1 q8_0/q8_0, 2-21 turbo3/turbo3, ..."; one text per KV cache,
    joined by " | "), kv_bytes_per_token the exact bytes one token takes in all KV caches'
    layers (the engine's plan line; without a plan, open_model counts them from the types
    and the GGUF header, tqgguf.kvplan.kv_bytes_per_token, not from the rounded MiB) and
    bits_per_value the average stored bits per K/V value; k_center_reason why
    ``--k-center auto`` chose its mode (set by open_model, "" when the mode was given);
    n_ctx_train the model's training context when llama.cpp compared n_ctx with it (0 when
    they are equal), so ``n_ctx > n_ctx_train > 0`` is llama.cpp's "possible training
    context overflow"; caches: each KV cache (:class:`KVCacheInfo`), in the log's order.
    """

    k_type: str = ""
    v_type: str = ""
    k_mib: float = 0.0
    v_mib: float = 0.0
    cells: int = 0
    attn_rot_k: bool | None = None
    attn_rot_v: bool | None = None
    flash_attn: str = ""
    n_ctx: int = 0
    k_center: str = ""
    k_center_active: bool = False
    k_center_reason: str = ""
    kv_plan: str = ""
    kv_plan_layers: str = ""
    kv_bytes_per_token: int | None = None
    bits_per_value: float | None = None
    n_ctx_train: int = 0
    caches: list[KVCacheInfo] = field(default_factory=list)
    log: str = field(default="", repr=False)


_KV_LINE = re.compile(r"size\s*=\s*([\d.]+) MiB \(\s*(\d+) cells,.*K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB")


def parse_kv_report(log: str) -> KVReport:
    """Parse llama.cpp's context-creation log (llama-kv-cache.cpp / llama-context.cpp lines)."""
    r = KVReport(log=log, caches=_caches(log))
    k_types: set[str] = set()
    v_types: set[str] = set()
    for m in _KV_LINE.finditer(log):  # one line per cache (Gemma-3: a sliding-window and a global one)
        k_types.add(m.group(3))
        v_types.add(m.group(5))
        r.k_mib += float(m.group(4))
        r.v_mib += float(m.group(6))
        r.cells = max(r.cells, int(m.group(2)))
    if k_types:
        r.k_type = k_types.pop() if len(k_types) == 1 else "mixed"
        r.v_type = v_types.pop() if len(v_types) == 1 else "mixed"
    # per cache as well; the rotation is on when any cache rotates (an f16 cache never does)
    rot_k = re.findall(r"attn_rot_k = (\d)", log)
    rot_v = re.findall(r"attn_rot_v = (\d)", log)
    r.attn_rot_k = any(x == "1" for x in rot_k) if rot_k else None
    r.attn_rot_v = any(x == "1" for x in rot_v) if rot_v else None
    fa = re.findall(r"flash_attn\s*=\s*(\w+)", log)
    r.flash_attn = fa[-1] if fa else ""
    ctx = re.findall(r"llama_context: n_ctx\s*=\s*(\d+)", log)
    r.n_ctx = int(ctx[-1]) if ctx else 0
    train = re.findall(r"n_ctx_seq \(\d+\) [<>] n_ctx_train \((\d+)\)", log)
    r.n_ctx_train = int(train[-1]) if train else 0
    kc = re.findall(r"k_center = (.*): (active|inactive)", log)
    if kc:
        r.k_center = kc[0][0]
        r.k_center_active = any(a == "active" for _, a in kc)
    plans = re.findall(r"kv_plan = (.*?): layers (.*) \(\d+ layers\); (\d+) bytes per token, ([\d.]+) bits/value", log)
    if plans:
        r.kv_plan = plans[0][0]
        r.kv_plan_layers = " | ".join(p[1] for p in plans)
        r.kv_bytes_per_token = sum(int(p[2]) for p in plans)
        values = sum(int(p[2]) * 8 / float(p[3]) for p in plans if float(p[3]) > 0)
        r.bits_per_value = 8 * r.kv_bytes_per_token / values if values else None
    return r


def training_context_warning(n_ctx: int, n_ctx_train: int) -> str | None:
    """The warning for a context of ``n_ctx`` tokens (per sequence / per slot) longer than the
    ``n_ctx_train`` tokens the model was trained on (llama.cpp logs it as "possible training
    context overflow", src/llama-context.cpp), or None (also when ``n_ctx_train`` is 0:
    unknown). The one wording for ppl, sweep and serve."""
    if n_ctx_train and n_ctx > n_ctx_train:
        return (f"warning: n_ctx {n_ctx} is beyond the model's training context ({n_ctx_train}); "
                f"positions past {n_ctx_train} were never trained, so answers and measured quality there "
                f"depend on the model's extrapolation as much as on the KV cache")
    return None


def resolve_flash_attn(mode: str, ctk: str, ctv: str) -> bool:
    """Resolve ``-fa on|off|auto`` to a bool like llama.cpp does.

    auto: enabled — every backend tqgguf builds (CPU, CUDA, Metal) runs flash attention for
    all cache types it accepts, and a quantized V cache requires it.
    Raises ValueError for an unknown mode or ``off`` with a quantized V cache.
    """
    mode = str(mode).strip().lower()
    if mode not in FLASH_ATTN_MODES:
        raise ValueError(f"unknown flash attention mode {mode!r}; allowed: {', '.join(FLASH_ATTN_MODES)}")
    if flash_attn_conflict(mode, ctv):
        raise ValueError(f"-fa off cannot be used with the quantized V cache type {ctv}; {FLASH_ATTN_RULE}")
    return mode != "off"


@dataclass
class Engine:
    """An opened model: ``llama`` is the llama_cpp.Llama, ``report`` what llama.cpp logged."""

    llama: object
    report: KVReport
    ctk: str
    ctv: str
    rotation: bool
    flash_attn: bool
    k_center: object = None  # the parsed tqgguf.kcenter.KCenter (auto resolved)
    k_center_env: str = "off"  # the LLAMA_K_CENTER value the cache was created with
    n_threads: int = 1
    k_center_reason: str = ""  # why --k-center auto chose k_center ("" when not auto)
    kv_plan: KVPlan | None = None
    placement: list = field(default_factory=list)  # tqgguf.devices.DevicePlacement per device
    offload_note: str = ""  # how -ngl was chosen ("-ngl auto: all 30 layers fit CUDA0 ...")
    n_gpu_layers: int = 0  # the -ngl the engine was given (-1 = all)

    def placement_lines(self) -> list[str]:
        """Where the layers and their K/V cache live, one line per device, after how -ngl was chosen."""
        return ([self.offload_note] if self.offload_note else []) + placement_lines(self.placement)

    def close(self) -> None:
        close = getattr(self.llama, "close", None)
        if close:
            close()


def open_model(model_path: str | os.PathLike, *, ctk: str = "f16", ctv: str = "f16", n_ctx: int = 512,
               n_batch: int | None = None, n_ubatch: int | None = None, flash_attn: str = "auto",
               rotation: bool = True, n_threads: int | None = None, n_gpu_layers: int = 0,
               logits_all: bool = False, seed: int = 0, verbose: bool = False, k_center: object = "off",
               kv_boundary: object = None, kv_swa: object = None, kv_plan: object = None,
               offload: Offload | None = None, fit_ctx: int | None = None, **llama_kwargs) -> Engine:
    """Load ``model_path`` with K/V cache types given by ggml name.

    Args:
        model_path: GGUF file.
        ctk, ctv: K and V cache type names (see ``tqgguf.cachetypes.KV_CACHE_TYPES``).
        n_ctx: context size in tokens; n_batch/n_ubatch default to min(n_ctx, 512).
        flash_attn: "on" | "off" | "auto".
        rotation: False sets LLAMA_ATTN_ROT_DISABLE=1 while the KV cache is created.
        n_gpu_layers: layers to offload (-ngl; -1 = all) when no ``offload`` is given. Refused
            (GPUOffloadError) when there is no offload device (llama.cpp would use the CPU).
        offload: where the model goes (tqgguf.devices.Offload: -ngl auto|all|N, --rpc workers,
            -sm, -ts, -mg, -dev); the workers are checked and registered first. The placement
            llama.cpp chose is in Engine.placement (per device: layer ranges, K and V MiB).
        fit_ctx: cells ``-ngl auto`` fits the KV cache for (default n_ctx; bench passes its
            deepest test, whose contexts it creates later on this model).
        logits_all: keep logits of every position (needed for perplexity).
        k_center: K centering, a ``--k-center`` value (off, bias, bias:N, calib,
            calib:FILE, auto; see tqgguf.kcenter). calib computes the vectors first when
            their file does not exist; auto is resolved for this model and the K types in
            use (tqgguf.kcenter.resolve_auto), the reason is in Engine.k_center_reason.
        kv_boundary, kv_swa, kv_plan: a layer plan (``--kv-boundary N[:K/V]``, ``--kv-swa
            K/V``, ``--kv-plan MAP|FILE``; tqgguf.kvplan.build_plan), or kv_plan a built
            KVPlan. Layers it does not name keep ctk/ctv.
    Returns:
        Engine with the Llama object and the parsed KVReport.
    Raises:
        CacheTypeError: unknown cache type name (lists the valid ones).
        ValueError: bad flash attention mode, -fa off with quantized V, missing file;
            KCenterError (a ValueError) for a bad k_center or a calib file of another model;
            KVPlanError (a ValueError) for a plan that is malformed or does not fit the model.
        EngineNotBuiltError: llama_cpp missing or not the tqgguf build.
        EngineError: llama.cpp refused (its error lines are in the message), e.g. a turbo
            type on a model whose head dim is not a multiple of 64; WorkerError (an EngineError)
            for an RPC worker that cannot be used, naming it.
        DeviceError (a ValueError): -dev, -ts or -mg that do not fit the devices.
    """
    ctk = check_cache_type(ctk, "K cache type (-ctk)")
    ctv = check_cache_type(ctv, "V cache type (-ctv)")
    path = Path(model_path)
    if not path.is_file():
        raise ValueError(f"model file not found: {path}")
    plan = kv_plan if isinstance(kv_plan, KVPlan) else build_plan(path, boundary=kv_boundary, swa=kv_swa, plan=kv_plan)
    fa = resolve_flash_attn(flash_attn, ctk, ctv)
    for v in sorted(plan.v_types(ctv)) if plan else ():
        if flash_attn_conflict(flash_attn, v):
            raise ValueError(f"-fa off cannot be used with the layer plan's quantized V cache type {v}; {FLASH_ATTN_RULE}")
    ensure_engine()
    off = offload or Offload(n_gpu_layers=n_gpu_layers)
    check_tensor_split(off.split_mode, [ctk, ctv, *(plan.k_types(ctk) | plan.v_types(ctv) if plan else ())],
                       bool(off.rpc))
    placed = off.prepare()
    import llama_cpp

    kc = parse_k_center(k_center)
    reason = ""
    if kc.mode == "auto":
        kc, reason = kcenter.resolve_auto(path, plan.k_types(ctk) if plan else {ctk})
    n_threads = n_threads or os.cpu_count() or 1
    k_center_env = kcenter.engine_value(kc, path, n_threads=n_threads)
    plan_env = plan.engine_value() if plan else ""
    warn_overrides({"LLAMA_ATTN_ROT_DISABLE": "0" if rotation else "1", "LLAMA_K_CENTER": k_center_env,
                    "LLAMA_KV_PLAN": plan_env},
                   {"LLAMA_ATTN_ROT_DISABLE": f"rotation {'on' if rotation else 'off'}",
                    "LLAMA_K_CENTER": f"--k-center {kc}" + (" (auto)" if reason else ""),
                    "LLAMA_KV_PLAN": plan.source if plan else "no layer plan"})
    n_batch = n_batch or min(n_ctx, 512)
    n_ubatch = n_ubatch or min(n_batch, 512)
    layers = model_layers(path)
    pairs = plan.types(ctk, ctv) if plan else [(ctk, ctv)] * layers.n_layer
    k_rows = [type_info(k).row_bytes(layers.n_head_kv * layers.head_k) for k, _ in pairs]
    v_rows = [type_info(v).row_bytes(layers.n_head_kv * layers.head_v) for _, v in pairs]
    ngl, offload_note = placed.layers(path, (fit_ctx or n_ctx) * max(k + v for k, v in zip(k_rows, v_rows)))
    split_kwargs = placed.llama_kwargs()
    if "devices" in split_kwargs and "devices" not in inspect.signature(llama_cpp.Llama.__init__).parameters:
        # Llama takes **kwargs: an engine built before the devices patch would drop -dev silently
        raise EngineError("the installed engine predates -dev/-sm none support (patches/sdist/0002): run `tqgguf build`")
    mark = capture.mark()
    capture.echo = verbose
    try:
        with engine_env(rotation=rotation, k_center=k_center_env, kv_plan=plan_env):
            llama = llama_cpp.Llama(
                model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch,
                n_threads=n_threads, n_threads_batch=n_threads, n_gpu_layers=ngl,
                type_k=ggml_type_id(ctk), type_v=ggml_type_id(ctv), flash_attn=fa,
                logits_all=logits_all, seed=seed, verbose=verbose, **split_kwargs, **llama_kwargs)
    except ValueError as e:
        log = capture.since(mark)
        errors = [ln.strip() for ln in log.splitlines()
                  if any(w in ln.lower() for w in ("error", "failed", "does not", "requires", "invalid"))]
        raise EngineError(f"llama.cpp could not open {path.name} with K={ctk} V={ctv}: "
                          + ("; ".join(errors[-4:]) or str(e))) from e
    load_log = capture.since(mark)
    report = parse_kv_report(load_log)
    report.k_center_reason = reason
    placement = parse_placement(load_log, layers.n_layer, k_rows, v_rows, report.cells,
                                {d.name: d.description for d in placed.devices})
    if plan is None and report.kv_bytes_per_token is None:  # one type pair: count the bytes exactly
        report.kv_bytes_per_token = kv_bytes_per_token([(ctk, ctv)] * layers.n_layer, layers,
                                                       lambda t, n: type_info(t).row_bytes(n))
        report.bits_per_value = bits_per_value([(ctk, ctv)], layers.head_k, layers.head_v,
                                               lambda t: type_info(t).bits_per_value)
    if plan is None and report.k_type and (report.k_type != ctk or report.v_type != ctv):
        llama.close()
        raise EngineError(f"llama.cpp used K={report.k_type} V={report.v_type}, not the requested {ctk}/{ctv}")
    if plan is not None and report.kv_plan != plan_env:
        llama.close()
        raise EngineError(f"the engine did not apply the layer plan {plan_env!r} (it logged "
                          f"{report.kv_plan or 'no plan'!r}); is the installed engine older than patch 0009? "
                          "run `tqgguf build`")
    return Engine(llama, report, ctk, ctv, rotation, fa, kc, k_center_env, n_threads, reason, plan, placement,
                  offload_note, ngl)


@dataclass
class Context:
    """A further llama_context on an opened model (see :func:`open_context`).

    ctx: the ``llama_context_p``; report: what llama.cpp logged when it created it;
    n_ctx, n_batch, n_ubatch, n_seq_max: the values it was created with.
    """

    ctx: object
    report: KVReport
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int

    def close(self) -> None:
        if self.ctx is not None:
            import llama_cpp

            llama_cpp.llama_free(self.ctx)
            self.ctx = None


def open_context(engine: Engine, *, n_ctx: int, n_batch: int, n_ubatch: int, n_seq_max: int = 1,
                 kv_unified: bool = False, swa_full: bool = False) -> Context:
    """A new llama_context on ``engine``'s loaded model, with its K/V types, flash attention,
    rotation, K centering, layer plan and threads, and the sizes given here — as llama-bench and
    llama-batched-bench create one context per test on a model loaded once.

    Args:
        n_ctx: KV cells (tokens) of the context; n_batch/n_ubatch: logical/physical batch.
        n_seq_max: sequences the context holds; kv_unified: one KV buffer shared by all
            sequences (False: each sequence gets n_ctx / n_seq_max cells, llama.cpp's default).
        swa_full: full-size cache for sliding-window layers (llama-bench passes False).
    Returns:
        Context; call ``close()`` (llama_free) when done.
    Raises:
        EngineError: llama.cpp could not create it (its error lines are in the message), or
            used other K/V types than the engine's.
    """
    import llama_cpp

    src = engine.llama.context_params
    cp = type(src).from_buffer_copy(src)
    cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, min(n_ubatch, n_batch)
    cp.n_seq_max, cp.kv_unified, cp.swa_full = n_seq_max, kv_unified, swa_full
    cp.n_threads = cp.n_threads_batch = engine.n_threads
    mark = capture.mark()
    with engine_env(rotation=engine.rotation, k_center=engine.k_center_env,
                    kv_plan=engine.kv_plan.engine_value() if engine.kv_plan else ""):
        ctx = llama_cpp.llama_init_from_model(engine.llama.model, cp)
    log = capture.since(mark)
    if not ctx:
        errors = [ln.strip() for ln in log.splitlines()
                  if any(w in ln.lower() for w in ("error", "failed", "does not", "requires", "invalid"))]
        raise EngineError(f"llama.cpp could not create a context of n_ctx {n_ctx}, n_seq_max {n_seq_max} with "
                          f"K={engine.ctk} V={engine.ctv}: " + ("; ".join(errors[-4:]) or "no reason logged"))
    report = parse_kv_report(log)
    if engine.kv_plan is None and report.k_type and (report.k_type != engine.ctk or report.v_type != engine.ctv):
        llama_cpp.llama_free(ctx)
        raise EngineError(f"llama.cpp used K={report.k_type} V={report.v_type}, not the requested "
                          f"{engine.ctk}/{engine.ctv}")
    return Context(ctx, report, n_ctx, n_batch, min(n_ubatch, n_batch), n_seq_max)
