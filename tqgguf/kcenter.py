"""In-engine K centering (``--k-center``): the KV cache stores k − m instead of k.

m is one fixed vector per layer (head_dim values per KV head). For every query q all logits
of a layer move by the same q·m, and softmax ignores a common shift, so attention is
unchanged (exactly, up to floating-point rounding), while a quantized K cache no longer
spends its per-block range on a large constant part of the keys. The engine side is
``native/src/llama-kv-center.cpp`` (patch 0005), switched by ``LLAMA_K_CENTER`` when the KV
cache is created; the K-shift adds m back around RoPE.

Modes (the ``--k-center`` / ``TQGGUF_K_CENTER`` value):

``auto`` (default)
    ``full`` when the model's keys carry a bias (``attn_k.bias``) and K is quantized
    (``bias`` where full does not serve the cache: sliding-window models, and ``tqgguf
    serve -np N`` with N > 1, whose slots are N KV streams), else ``off``; see
    :func:`resolve_auto`. An explicit ``full`` there is refused (:func:`check_full`).
``off``
    no centering.
``bias`` / ``bias:N``
    data-free: m = the ``attn_k.bias`` components in RoPE pairs whose period exceeds the
    model's training context (or N tokens), plus unrotated dims — the part of the RoPE'd
    bias that is (nearly) the same at every position. Computed by the engine at load; a
    model without K bias has nothing to subtract (the engine logs "inactive").
``calib`` / ``calib:FILE``
    m = the per-layer, per-KV-head mean of post-RoPE keys over a calibration text (by
    default 4 × 512 tokens of the built-in pydoc corpus, which is not the WikiText-2
    evaluation text). Computed once with the engine's graph callback and stored as a small
    GGUF beside the model (``MODEL.k_center.gguf``) or in FILE; later runs reuse it after
    checking it was made from the same model file (sha256).

Prior art: SageAttention (arXiv:2410.02367, §4.2) subtracts the token mean of K inside its
kernel; PrismML-Eng/llama.cpp PR #51 (``--kv-mean-center``) subtracts a calibrated per-head
mean at cache write for q4_0.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .cachetypes import is_quantized, libggml_base
from .values import KCenter, KCenterError, parse_k_center
from .engine import EngineError, engine_env, ensure_engine
from .fsutil import atomic_output, sha256_file_cached
from .kvplan import model_layers
from .texts import builtin_corpus

CALIB_SUFFIX = ".k_center.gguf"
CALIB_ARCH = "tqgguf-k-center"
KEY = "tqgguf.k_center."


def resolve_auto(model_path: str | os.PathLike, k_types: set[str] | list[str] | tuple[str, ...],
                 streams: int = 1) -> tuple[KCenter, str]:
    """What ``--k-center auto`` means for this model and these K cache types, and why.

    full when the model's keys carry a bias (``blk.N.attn_k.bias`` tensors in the GGUF) and
    some layer's K cache (``k_types``: every K type in use, -ctk and a layer plan's) is
    quantized: without it Qwen2-family models collapse under a quantized K (turbo4/turbo4
    +224% PPL on Qwen2.5-Coder-0.5B, +2.0% with full; docs/K_CENTERING.md). The engine's
    full mode does not serve sliding-window caches, nor a cache of several KV streams
    (``streams`` > 1: llama-server's -np slots, each its own stream), so those get bias, the
    best mode they take. Otherwise off, so a model without K bias, or an unquantized K, runs
    exactly as with --k-center off.

    Returns (the resolved KCenter, a one-line reason). Raises KVPlanError (a ValueError)
    when the file is not a readable GGUF.
    """
    layers = model_layers(model_path)
    quant = sorted(t for t in set(k_types) if is_quantized(t))
    if not layers.k_bias_layers:
        return KCenter(), "the model's keys carry no bias (no attn_k.bias tensors)"
    bias = f"the model's keys carry a bias (attn_k.bias in {layers.k_bias_layers} of {layers.n_layer} layers)"
    if not quant:
        return KCenter(), f"{bias}, but K is not quantized ({', '.join(sorted(set(k_types)))}): nothing to gain"
    if (why := _full_unserved(layers, streams)) is not None:
        return KCenter("bias"), f"{bias} and K is quantized ({', '.join(quant)}); {why}, so bias (the slow-RoPE part of the bias)"
    return KCenter("full"), f"{bias} and K is quantized ({', '.join(quant)})"


def _full_unserved(layers, streams: int) -> str | None:
    """Why the engine's full mode refuses this model's cache (it has a K bias; sliding-window
    layers, or ``streams`` > 1 KV streams), or None. One stream: full adds RoPE(b) back from
    the positions of the cells of one KV stream, and llama-server gives each -np slot a stream
    of its own (patch 0006, native/src/llama-kv-center.cpp)."""
    if not layers.k_bias_layers:
        return None  # nothing to add back: the engine accepts full and does nothing
    if layers.swa:
        return "full does not serve sliding-window caches"
    if streams > 1:
        return (f"full does not serve a cache of {streams} streams (llama-server gives each -np slot a KV stream "
                f"of its own, and full adds the bias back from the positions of one stream's cells)")
    return None


def check_full(kc: KCenter, model_path: str | os.PathLike, streams: int = 1) -> None:
    """Refuse an explicit ``--k-center full`` that the engine would refuse for this model
    when ``streams`` KV streams (llama-server's -np slots) are served: a model with a K bias
    and sliding-window layers or several streams. Other modes pass. Raises KCenterError
    naming -np and the modes that serve it; KVPlanError when the file is not a readable GGUF."""
    if kc.mode != "full":
        return
    layers = model_layers(model_path)
    if (why := _full_unserved(layers, streams)) is None:
        return
    alternatives = "use --k-center bias, bias:N, calib, calib:FILE or off (auto picks bias here)"
    if layers.swa:
        raise KCenterError(f"--k-center full cannot serve {Path(model_path).name}: {why}; {alternatives}")
    raise KCenterError(f"--k-center full cannot serve {Path(model_path).name} with -np {streams}: {why}; "
                       f"{alternatives}, or -np 1")


def calib_path(model_path: str | os.PathLike, kc: KCenter) -> Path:
    """Where the calibration vectors of ``model_path`` live: kc.path or MODEL.k_center.gguf."""
    if kc.path is not None:
        return kc.path
    p = Path(model_path)
    return p.with_name(p.name + CALIB_SUFFIX) if p.suffix != ".gguf" else p.with_suffix(CALIB_SUFFIX)


def engine_value(kc: KCenter | str | None, model_path: str | os.PathLike, *,
                 log: Callable[[str], None] | None = None, n_threads: int | None = None) -> str:
    """The ``LLAMA_K_CENTER`` value for the engine: "off", "bias[:N]" or "file:PATH".

    For calib, the vectors are computed (and written) first when the file does not exist;
    an existing file is checked against the model and reused. Either way ``log`` (default:
    stderr) gets one line naming the file and what it was computed from. Raises KCenterError.
    """
    kc = parse_k_center(kc)
    if kc.mode == "auto":
        raise KCenterError("--k-center auto must be resolved for the model and K type first (resolve_auto)")
    if kc.mode == "off":
        return "off"
    if kc.mode in ("bias", "full"):
        return str(kc)
    path = calib_path(model_path, kc)
    if path.is_dir():
        raise KCenterError(f"calibration file {path} is a directory; give a file path: calib:FILE")
    if path.exists():
        meta = check_calib_file(path, model_path)
        (log or _stderr)(f"k-center calib: reusing {path}: per-layer mean keys of {meta.get('model')} over "
                         f"{meta.get('tokens')} tokens of {meta.get('text')} (n_ctx {meta.get('n_ctx')})")
    else:
        if not _writable_dir(path.parent):
            raise KCenterError(f"cannot write the calibration file {path}: its directory does not exist or is "
                               "not writable; pass --k-center calib:FILE with a writable FILE")
        (log or _stderr)(f"k-center calib: computing per-layer mean keys of {Path(model_path).name} -> {path}")
        write_calib_file(path, model_path, calibrate(model_path, n_threads=n_threads))
    return f"file:{path}"


def _writable_dir(d: Path) -> bool:
    """True when a file can be created in ``d`` (probed: os.access is True for root on /proc)."""
    try:
        with tempfile.TemporaryFile(dir=d):
            return True
    except OSError:
        return False


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


# ----------------------------------------------------------------------------- calibration

# struct ggml_tensor (ggml/include/ggml.h): enum ggml_type type; (padded to 8 bytes)
# struct ggml_backend_buffer * buffer; int64_t ne[4]; size_t nb[4]; ...
_NE_OFFSET = 16
_NB_OFFSET = 48
_KCUR = re.compile(rb"^Kcur-(\d+)$")


@dataclass
class Calibration:
    """Per-layer mean post-RoPE keys: ``means[layer]`` is float32 [n_kv_heads * head_dim]
    (the cache row layout); ``tokens`` is how many keys each mean averages."""

    means: dict[int, np.ndarray]
    tokens: int
    text_label: str
    n_ctx: int


def calibrate(model_path: str | os.PathLike, *, text: str | None = None, text_label: str | None = None,
              n_ctx: int = 512, chunks: int = 4, n_threads: int | None = None) -> Calibration:
    """Mean post-RoPE key of every layer and KV head over ``chunks`` windows of ``n_ctx``
    tokens of ``text`` (default: the built-in pydoc corpus).

    Keys are read from the graph's ``Kcur-<layer>`` tensors (the last one of a layer in a
    ubatch, i.e. after RoPE) through the scheduler's eval callback, before they reach the
    KV cache, so the cache type does not matter.
    Raises KCenterError when the model has no vocabulary (tqgguf.models.vocabulary_error: the
    text could not be tokenized), the text is too short or no key tensor was seen;
    EngineError/EngineNotBuiltError from the engine.
    """
    from .models import vocabulary_error

    if (why := vocabulary_error(model_path, "--k-center calib tokenizes its calibration text",
                               "another --k-center mode (bias, off)")) is not None:
        raise KCenterError(why)
    if text is None:
        text, text_label = builtin_corpus(), "built-in pydoc corpus"
    ensure_engine()
    import llama_cpp

    lib = libggml_base()
    lib.ggml_get_name.restype = ctypes.c_char_p
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    get = lib.ggml_backend_tensor_get
    get.restype = None
    get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]

    sums: dict[int, np.ndarray] = {}
    seen: dict[int, np.ndarray] = {}

    def on_tensor(t, ask, _user):
        name = lib.ggml_get_name(t) or b""
        m = _KCUR.match(name)
        if m is None:
            return not ask  # ask: not wanted; otherwise keep computing
        if ask:
            return True
        ttype = ctypes.c_int32.from_address(t).value
        ne = (ctypes.c_int64 * 4).from_address(t + _NE_OFFSET)
        nb = (ctypes.c_size_t * 4).from_address(t + _NB_OFFSET)
        if ttype != 0 or nb[0] != 4 or nb[1] != 4 * ne[0] or nb[2] != nb[1] * ne[1]:
            return True  # not a contiguous F32 [head_dim, n_head_kv, n_tokens] tensor
        buf = np.empty(ne[0] * ne[1] * ne[2], dtype=np.float32)
        get(t, buf.ctypes.data, 0, buf.nbytes)
        seen[int(m.group(1))] = buf.reshape(ne[2], ne[0] * ne[1])
        return True

    callback = llama_cpp.ggml_backend_sched_eval_callback(on_tensor)  # kept alive until the context is freed

    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    with engine_env(rotation=False, k_center="off"):
        model = llama_cpp.llama_model_load_from_file(os.fsencode(str(model_path)), mparams)
    if not model:
        raise EngineError(f"llama.cpp could not load {model_path}")
    ctx = None
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        data = text.encode("utf-8")
        n_max = len(data) + 16
        toks = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), toks, n_max, True, False)
        if n < 0:
            raise KCenterError("tokenizing the calibration text failed")
        if n < n_ctx:
            raise KCenterError(f"the calibration text has {n} tokens; at least n_ctx = {n_ctx} are needed")
        chunks = max(1, min(chunks, n // n_ctx))
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = n_ctx
        cparams.n_threads = cparams.n_threads_batch = n_threads or os.cpu_count() or 1
        cparams.cb_eval = callback
        cparams.cb_eval_user_data = None
        with engine_env(rotation=False, k_center="off"):
            ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            raise EngineError(f"llama.cpp could not create a context for {model_path}")
        mem = llama_cpp.llama_get_memory(ctx)
        count = 0
        for c in range(chunks):
            llama_cpp.llama_memory_clear(mem, True)
            window = (llama_cpp.llama_token * n_ctx)(*toks[c * n_ctx:(c + 1) * n_ctx])
            seen.clear()
            rc = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(window, n_ctx))
            if rc != 0:
                raise EngineError(f"llama_decode failed ({rc}) during calibration")
            for il, keys in seen.items():
                s = keys.astype(np.float64).sum(axis=0)
                sums[il] = sums[il] + s if il in sums else s
            count += n_ctx
    finally:
        if ctx:
            llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
    if not sums:
        raise KCenterError(f"no Kcur-<layer> tensor was seen while running {Path(model_path).name}: "
                           "its graph does not name its keys the usual way; use --k-center bias")
    return Calibration({il: (s / count).astype(np.float32) for il, s in sorted(sums.items())},
                       count, text_label or "text", n_ctx)


# ----------------------------------------------------------------------------- the file

def write_calib_file(path: str | os.PathLike, model_path: str | os.PathLike, cal: Calibration) -> Path:
    """Write ``cal`` as a GGUF: one F32 tensor ``blk.N.k_center`` per layer, plus
    ``tqgguf.k_center.*`` keys (model file name and sha256, text, tokens, n_ctx). Atomic."""
    from gguf import GGUFWriter

    path = Path(path)
    try:
        with atomic_output(path, suffix=".tmp") as tmp:
            w = GGUFWriter(tmp, CALIB_ARCH)
            w.add_string(KEY + "method", "calib: per-layer, per-KV-head mean of post-RoPE keys")
            w.add_string(KEY + "model", Path(model_path).name)
            w.add_string(KEY + "model_sha256", sha256_file_cached(model_path))
            w.add_string(KEY + "text", cal.text_label)
            w.add_uint32(KEY + "tokens", int(cal.tokens))
            w.add_uint32(KEY + "n_ctx", int(cal.n_ctx))
            for il, m in cal.means.items():
                w.add_tensor(f"blk.{il}.k_center", np.ascontiguousarray(m, dtype=np.float32))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
    except OSError as e:
        raise KCenterError(f"cannot write the calibration file {path}: {e.strerror or e}; "
                           "pass --k-center calib:FILE with a writable FILE") from e
    return path


def read_calib_file(path: str | os.PathLike) -> tuple[dict[str, object], dict[int, np.ndarray]]:
    """(metadata without the prefix, layer -> vector) of a calibration file; KCenterError
    when it is not one."""
    from gguf import GGUFReader

    try:
        r = GGUFReader(path, "r")
    except Exception as e:  # noqa: BLE001 - the reader raises several types on bad files
        raise KCenterError(f"{path} is not a readable GGUF calibration file: {e}") from e
    meta = {k[len(KEY):]: f.contents() for k, f in r.fields.items() if k.startswith(KEY)}
    vecs = {}
    for t in r.tensors:
        m = re.fullmatch(r"blk\.(\d+)\.k_center", t.name)
        if m:
            vecs[int(m.group(1))] = np.asarray(t.data, dtype=np.float32).reshape(-1)
    if "model_sha256" not in meta or not vecs:
        raise KCenterError(f"{path} is not a tqgguf K-center calibration file (no {KEY}model_sha256 "
                           "or no blk.N.k_center tensors)")
    return meta, vecs


def check_calib_file(path: str | os.PathLike, model_path: str | os.PathLike) -> dict[str, object]:
    """Check that ``path`` was computed from ``model_path`` (same sha256); KCenterError if not."""
    meta, _ = read_calib_file(path)
    if meta["model_sha256"] != sha256_file_cached(model_path):
        raise KCenterError(f"{path} was computed for {meta.get('model')} (sha256 "
                           f"{str(meta['model_sha256'])[:12]}…), not for {Path(model_path).name}; "
                           "delete it or pass --k-center calib:OTHER_FILE")
    return meta
