"""The roofline columns of a tg row: the KV and weight bytes one generated token reads, the
bandwidth of the device that holds the weights (measured through ggml once per device and
kept in ``bandwidth.json``, or given with ``--bandwidth``) and the share of it the row's
t/s reaches.
"""
from __future__ import annotations

import json
import time
from typing import Callable

from .spec import BenchSpec, Test


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


def weights_on(placement: list, n_layer: int) -> str | None:
    """Which one device a decode reads every weight from: "CPU", or the name ggml gives the
    device (e.g. "CUDA0") when it holds all ``n_layer`` repeating layers and the output layer;
    None when they are split over devices (no one device's bandwidth bounds the decode).
    ``placement``: the engine's tqgguf.devices.DevicePlacement per device, as parsed from
    llama.cpp's load log (the token embeddings stay on the CPU and do not count: a token
    gathers one row of them). Decided from where the layers went, not from the asked -ngl
    (which -ngl auto, -dev and the workers resolve)."""
    holders = [p for p in placement if p.layers or p.output]
    if not holders or all(p.device == "CPU" for p in holders):
        return "CPU"
    if len(holders) == 1 and holders[0].output and sum(b - a + 1 for a, b in holders[0].layers) >= n_layer:
        return holders[0].device
    return None


#: where :func:`device_bandwidth` keeps the figures it measured, in the results directory
BANDWIDTH_FILE = "bandwidth.json"


def device_bandwidth(spec: BenchSpec, device: str, n_threads: int, log: Callable[[str], None] | None = None
                     ) -> tuple[float, str]:
    """The bandwidth (bytes/s) the roofline column divides by, and its source for the column
    header: ``spec.bandwidth`` ("given"), else the copy bandwidth tqgguf.engine.copy_bandwidth
    measures through the engine's ggml backend on ``device`` (a ggml device name, e.g. "CUDA0",
    or "CPU" with ``n_threads`` threads; 2 x tqgguf.engine.COPY_BYTES) — measured once per device
    (and thread count) and
    kept in ``<out_dir>/bandwidth.json``, so every run in a directory divides by the same
    figure. Raises EngineError when it cannot be measured."""
    if spec.bandwidth:
        return spec.bandwidth, "given"
    from ..engine import COPY_BYTES, copy_bandwidth

    path = spec.out_dir / BANDWIDTH_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    cpu = device == "CPU"
    key = f"cpu, {n_threads} threads" if cpu else device
    if not isinstance(known, dict) or not isinstance(known.get(key), dict):
        known = known if isinstance(known, dict) else {}
        nbytes = COPY_BYTES
        bps, desc = copy_bandwidth(device=None if cpu else device, n_threads=n_threads, nbytes=nbytes)
        known[key] = {"bytes_per_s": bps, "device": desc, "method": f"ggml GGML_OP_CPY of 2 x {nbytes >> 20} MiB "
                      "f32, fastest of 10, bytes read + written", "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1) + "\n")
        if log:
            log(f"copy bandwidth of {desc} ({key}): {bps / 1e9:.1f} GB/s, kept in {path}")
    return float(known[key]["bytes_per_s"]), "measured"


def roofline_fields(t: Test, report, model_facts: dict, avg_ts: float, placement: list,
                    bandwidth: Callable[[str], tuple[float, str] | None] | None) -> dict:
    """The roofline fields of a tg row (none for a pp row): kv_read_bytes and
    weight_read_bytes per token; with the weights on one device, also bandwidth_bytes_per_s,
    bandwidth_source (measured | given) and bandwidth_fraction = (KV + weight bytes per token)
    x t/s / bandwidth. ``model_facts``: {"layers": ModelLayers, "tensors": tensor bytes,
    "n_swa": the window}; ``placement``: the engine's devices (:func:`weights_on`);
    ``bandwidth(device)`` gives (bytes/s, source), or None when it could not be measured (then
    no fraction)."""
    if not t.n_gen:
        return {}
    from ..cachetypes import type_info

    layers = model_facts["layers"]
    per_cell = [(kv_bytes_per_cell(c, layers, lambda ty, n: type_info(ty).row_bytes(n)), c.swa) for c in report.caches]
    kv = kv_read_bytes(per_cell, t.n_depth, t.n_gen, model_facts["n_swa"])
    w = weight_read_bytes(model_facts["tensors"])
    out = {"kv_read_bytes": kv, "weight_read_bytes": w}
    device = weights_on(placement, layers.n_layer)
    measured = bandwidth(device) if device and bandwidth else None
    if measured:
        bps, source = measured
        out |= {"bandwidth_bytes_per_s": bps, "bandwidth_source": source, "bandwidth_fraction": (kv + w) * avg_ts / bps}
    return out

