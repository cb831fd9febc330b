"""Data-free K centering of a GGUF: drop the slow-RoPE part of every ``attn_k.bias``.

Why it is (nearly) exact
------------------------
Attention is invariant to adding one fixed vector m to every key: each logit of a query q
moves by the same q·m and softmax does not see it. A K projection bias b (Qwen2 family)
enters the key *before* RoPE, so the key at position s carries R(s)·b. In the RoPE pairs
whose angular speed θ_i is tiny (period 2π/θ_i far beyond the context) R(s) is almost the
identity over any distance a query looks back, so that part of R(s)·b is an almost
constant vector: removing it from the bias leaves every query's softmax (nearly) where it
was, while the per-row range a quantized K cache has to cover shrinks from the bias norm
(~hundreds) to the token-dependent part (~tens). Components a head does not rotate at all
(``rope.dimension_count`` < head dim) are exactly constant and are removed too.

The logit error from pair i at query-key distance Δ is at most
``|q_i|·|b_i|·2·|sin(θ_i·Δ/2)|``; with period T_i > N and Δ ≤ N that is
``≤ |q_i||b_i|·2 sin(π·Δ/T_i)``. A larger ``ctx`` removes fewer pairs and tightens it.

What this module does
---------------------
``plan_center`` reads the GGUF (``gguf.GGUFReader``), works out the RoPE geometry the way
llama.cpp does (base, ``rope.dimension_count``, head dim, linear / YaRN scaling,
``rope_freqs`` factors; LongRoPE and unknown scaling types are refused) and the pairing
(NEOX: (i, i + n_rot/2); normal: (2i, 2i+1)) from llama.cpp's ``llama_model_rope_type``
on a vocab-only load, with a small table as fallback. ``write_centered`` copies every KV
field and tensor unchanged (same order, types and bytes) except the zeroed bias
components, and adds ``tqgguf.k_center.*`` keys recording what was done.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .engine import ensure_engine
from .fsutil import atomic_output

KEY_PREFIX = "tqgguf.k_center."
FORMAT_VERSION = 1

# llama.cpp's enum llama_rope_type
ROPE_NONE, ROPE_NORM, ROPE_NEOX, ROPE_MROPE, ROPE_VISION, ROPE_IMROPE = -1, 0, 2, 8, 24, 40
ROPE_TYPE_NAMES = {ROPE_NONE: "none", ROPE_NORM: "norm", ROPE_NEOX: "neox", ROPE_MROPE: "mrope",
                   ROPE_VISION: "vision", ROPE_IMROPE: "imrope"}

# Fallback when llama.cpp cannot be asked (llama.cpp src/llama-model.cpp, llama_model_rope_type).
_NORM_ARCHS = {
    "llama", "llama4", "deci", "baichuan", "starcoder", "internlm2", "minicpm", "xverse", "command-r",
    "cohere2", "olmo", "arctic", "deepseek", "deepseek2", "plm", "chatglm", "granite", "granitemoe",
    "chameleon", "bailingmoe", "smollm3", "arcee", "ernie4_5", "ernie4_5-moe", "mistral3",
}
_NEOX_ARCHS = {
    "qwen", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "falcon", "grok", "dbrx", "stablelm", "bitnet",
    "olmo2", "olmoe", "phi2", "phi3", "phimoe", "plamo", "gemma", "gemma2", "gemma3", "starcoder2",
    "openelm", "gptneox", "codeshell", "orion", "nemotron", "exaone", "minicpm3", "seed_oss",
}
_NONE_ARCHS = {"gpt2", "gptj", "mpt", "refact", "bloom", "mamba", "mamba2", "jais", "t5", "t5encoder",
               "rwkv6", "rwkv7", "jina-bert-v2"}

_K_BIAS_RE = re.compile(r"^blk\.(\d+)\.attn_k\.bias$")
_ATTN_RE = re.compile(r"^blk\.\d+\.attn_(q|k|v|qkv|q_a|kv_a_mqa|output)\b")


class CenterError(ValueError):
    """The input cannot be centered; the message says why (bad file, unsupported model...)."""


# ----------------------------------------------------------------------------- RoPE geometry

@dataclass(frozen=True)
class Rope:
    """The RoPE geometry of a model's attention, as llama.cpp applies it."""

    arch: str
    rope_type: int                # ROPE_NORM or ROPE_NEOX
    rope_type_source: str         # "llama.cpp" or "table"
    head_dim: int                 # key head dim (rows of attn_k.bias per KV head)
    n_rot: int                    # rotated dims per head (rope.dimension_count)
    freq_base: float
    scaling: str                  # "none", "linear" or "yarn"
    factor: float                 # context scaling factor (1 = none)
    n_ctx_train: int
    n_ctx_orig: int               # YaRN original context
    yarn_ext_factor: float
    yarn_beta_fast: float
    yarn_beta_slow: float

    @property
    def pairing(self) -> str:
        return ROPE_TYPE_NAMES[self.rope_type]

    def theta(self, freq_factors: np.ndarray | None = None) -> np.ndarray:
        """Angular speed (radians per token) of each of the n_rot/2 pairs, as ggml's
        rope computes it (ggml-cpu ops.cpp: rope_yarn, ggml_rope_cache_init)."""
        n_pairs = self.n_rot // 2
        i = np.arange(n_pairs, dtype=np.float64)
        extrap = self.freq_base ** (-2.0 * i / self.n_rot)
        if freq_factors is not None:
            extrap = extrap / np.asarray(freq_factors, dtype=np.float64)[:n_pairs]
        freq_scale = 1.0 / self.factor
        interp = extrap * freq_scale
        if self.scaling == "yarn" and self.yarn_ext_factor != 0.0:
            low, high = yarn_corr_dims(self.n_rot, self.n_ctx_orig, self.freq_base,
                                       self.yarn_beta_fast, self.yarn_beta_slow)
            y = (i - low) / max(0.001, high - low)
            ramp = 1.0 - np.clip(y, 0.0, 1.0)
            mix = ramp * self.yarn_ext_factor
            return interp * (1.0 - mix) + extrap * mix
        return interp

    def periods(self, freq_factors: np.ndarray | None = None) -> np.ndarray:
        """Period in tokens (2π/θ_i) of each rotated pair."""
        return 2.0 * math.pi / self.theta(freq_factors)

    def pair_dims(self, i: int) -> tuple[int, int]:
        """The two head dims rotated together by pair i."""
        if self.rope_type == ROPE_NEOX:
            return i, i + self.n_rot // 2
        return 2 * i, 2 * i + 1


def yarn_corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims (ggml.c)."""
    def corr(n_rot: float) -> float:
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))
    start = math.floor(corr(beta_fast))
    end = math.ceil(corr(beta_slow))
    return max(0.0, start), min(n_dims - 1.0, end)


def llama_rope_type(path: str | os.PathLike) -> int | None:
    """``llama_model_rope_type`` of the model, from a vocab-only load in the installed
    llama.cpp; None when the engine is not available or refuses the file."""
    try:
        ensure_engine()  # patched build present; llama.cpp's log goes to the capture
        import llama_cpp
    except Exception:  # noqa: BLE001 - any failure means: use the table
        return None
    try:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(os.fsencode(str(path)), params)
    except Exception:  # noqa: BLE001
        return None
    if not model:
        return None
    try:
        return int(llama_cpp.llama_model_rope_type(model))
    finally:
        llama_cpp.llama_model_free(model)


def table_rope_type(arch: str) -> int | None:
    if arch in _NEOX_ARCHS:
        return ROPE_NEOX
    if arch in _NORM_ARCHS:
        return ROPE_NORM
    if arch in _NONE_ARCHS:
        return ROPE_NONE
    return None


# ----------------------------------------------------------------------------- reading

def _field_value(reader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return default if v is None else v


def open_gguf(path: str | os.PathLike):
    """GGUFReader on ``path``; CenterError for a non-GGUF or truncated file."""
    from gguf import GGUFReader

    path = Path(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise CenterError(f"cannot read {path}: {e.strerror or e}") from e
    if magic != b"GGUF":
        raise CenterError(f"{path} is not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    try:
        reader = GGUFReader(path, "r")
    except Exception as e:  # noqa: BLE001 - the reader raises ValueError/IndexError/KeyError/...
        raise CenterError(f"{path} is not a readable GGUF file (truncated or corrupt): {e}") from e
    size = path.stat().st_size
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size or t.data.nbytes != t.n_bytes:
            raise CenterError(f"{path} is truncated: tensor {t.name} needs bytes up to {end:,} "
                              f"but the file has {size:,}")
    return reader


def rope_of(reader, path: str | os.PathLike, *, arch: str) -> Rope:
    """The model's RoPE geometry; CenterError for unsupported scaling / pairing."""
    def kv(name, default=None):
        return _field_value(reader, f"{arch}.{name}", default)

    n_embd = kv("embedding_length")
    n_head = kv("attention.head_count")
    if isinstance(n_head, list):  # per-layer head counts: all layers must agree on the head dim
        n_head = max(n_head) if n_head else None
    head_dim = kv("attention.key_length")
    if head_dim is None:
        if not n_embd or not n_head:
            raise CenterError(f"cannot work out the head dim: {arch}.attention.key_length is missing and "
                              f"{arch}.embedding_length / {arch}.attention.head_count are "
                              f"{n_embd!r} / {n_head!r}")
        head_dim = int(n_embd) // int(n_head)
    head_dim = int(head_dim)
    n_rot = int(kv("rope.dimension_count", head_dim))
    if n_rot <= 0 or n_rot % 2 or n_rot > head_dim:
        raise CenterError(f"bad {arch}.rope.dimension_count {n_rot} for head dim {head_dim}")
    for key in ("rope.freq_base_swa", "rope.dimension_count_swa", "attention.key_length_swa"):
        if kv(key) is not None:
            raise CenterError(f"{arch}.{key} is set: per-layer RoPE geometry (sliding-window layers) "
                              "is not supported by `center`")
    if kv("rope.dimension_sections") is not None:
        raise CenterError(f"{arch}.rope.dimension_sections is set (multi-section M-RoPE): not supported")

    scaling = str(kv("rope.scaling.type", "linear")).lower()
    factor = kv("rope.scaling.factor")
    if factor is None:
        factor = kv("rope.scale_linear")
    factor = 1.0 if not factor else float(factor)
    names = {t.name for t in reader.tensors}
    if scaling == "longrope" or "rope_factors_long.weight" in names or "rope_factors_short.weight" in names:
        raise CenterError("LongRoPE scaling (rope_factors_long/short): the periods depend on the runtime "
                          "context length; not supported by `center`")
    if scaling not in ("none", "linear", "yarn"):
        raise CenterError(f"unknown RoPE scaling type {scaling!r} ({arch}.rope.scaling.type); "
                          "supported: none, linear, yarn")
    if scaling == "none":
        factor = 1.0
    if factor <= 0:
        raise CenterError(f"bad RoPE scaling factor {factor}")

    n_ctx_train = int(kv("context_length", 0) or 0)
    n_ctx_orig = int(kv("rope.scaling.original_context_length", n_ctx_train) or n_ctx_train)
    ext = kv("rope.scaling.yarn_ext_factor")
    ext = (1.0 if scaling == "yarn" else 0.0) if ext is None or float(ext) < 0 else float(ext)

    rt = llama_rope_type(path)
    source = "llama.cpp"
    if rt is None:
        rt, source = table_rope_type(arch), "table"
    if rt is None:
        raise CenterError(f"unknown RoPE pairing for architecture {arch!r}: llama.cpp could not be asked "
                          "(engine not built?) and it is not in the fallback table")
    if rt == ROPE_NONE:
        raise CenterError(f"architecture {arch!r} does not use RoPE (llama.cpp rope type none): "
                          "not supported by `center`")
    if rt not in (ROPE_NORM, ROPE_NEOX):
        raise CenterError(f"RoPE type {ROPE_TYPE_NAMES.get(rt, rt)!r} of architecture {arch!r} "
                          "is not supported by `center` (only norm and neox)")
    return Rope(arch=arch, rope_type=rt, rope_type_source=source, head_dim=head_dim, n_rot=n_rot,
                freq_base=float(kv("rope.freq_base", 10000.0)), scaling=scaling, factor=factor,
                n_ctx_train=n_ctx_train, n_ctx_orig=n_ctx_orig, yarn_ext_factor=ext,
                yarn_beta_fast=float(kv("rope.scaling.yarn_beta_fast", 32.0)),
                yarn_beta_slow=float(kv("rope.scaling.yarn_beta_slow", 1.0)))


# ----------------------------------------------------------------------------- planning

@dataclass
class LayerPlan:
    layer: int
    tensor: str
    n_head_kv: int
    pairs_removed: int            # rotated pairs zeroed, over all KV heads of the layer
    dims_removed: int             # components zeroed (2 per pair + unrotated dims)
    norm_before: float
    norm_removed: float
    norm_after: float
    drift: float                  # max |(R(d) - I) b_removed| over d <= drift_distance (0 = exact)
    new_data: np.ndarray = field(repr=False)


@dataclass
class CenterPlan:
    """What ``center`` will do to one file (nothing written yet)."""

    path: Path
    arch: str
    ctx: int | None = None
    rope: Rope | None = None
    slow_pairs: list[int] = field(default_factory=list)   # pair indices (within a head) removed
    periods: np.ndarray | None = None                     # period of every pair (tokens)
    unrotated_dims: int = 0                                # head dims RoPE leaves alone (removed)
    drift_distance: int = 0                                # tokens the drift is measured over
    layers: list[LayerPlan] = field(default_factory=list)
    nothing_to_do: str | None = None                      # reason, when nothing will be written
    reader: Any = field(default=None, repr=False)

    def metadata(self) -> dict[str, tuple[Any, Any, Any]]:
        """The ``tqgguf.k_center.*`` KV fields: key -> (value, type, sub_type)."""
        from gguf import GGUFValueType as T

        r = self.rope
        assert r is not None and self.ctx is not None
        L = self.layers
        md = {
            "version": (FORMAT_VERSION, T.UINT32, None),
            "method": ("zero attn_k.bias components in RoPE pairs with period > ctx tokens "
                       "and in unrotated dims", T.STRING, None),
            "ctx": (int(self.ctx), T.UINT32, None),
            "rope_pairing": (r.pairing, T.STRING, None),
            "rope_pairing_source": (r.rope_type_source, T.STRING, None),
            "freq_base": (float(r.freq_base), T.FLOAT32, None),
            "n_rot": (int(r.n_rot), T.UINT32, None),
            "head_dim": (int(r.head_dim), T.UINT32, None),
            "scaling": (r.scaling, T.STRING, None),
            "scaling_factor": (float(r.factor), T.FLOAT32, None),
            "pairs": ([int(i) for i in self.slow_pairs] or [0], T.ARRAY, T.UINT32),
            "n_pairs_per_head": (len(self.slow_pairs), T.UINT32, None),
            "unrotated_dims": (int(self.unrotated_dims), T.UINT32, None),
            "layers": ([p.layer for p in L], T.ARRAY, T.UINT32),
            "pairs_removed": ([p.pairs_removed for p in L], T.ARRAY, T.UINT32),
            "dims_removed": ([p.dims_removed for p in L], T.ARRAY, T.UINT32),
            "norm_before": ([float(p.norm_before) for p in L], T.ARRAY, T.FLOAT32),
            "norm_removed": ([float(p.norm_removed) for p in L], T.ARRAY, T.FLOAT32),
            "norm_after": ([float(p.norm_after) for p in L], T.ARRAY, T.FLOAT32),
            "drift": ([float(p.drift) for p in L], T.ARRAY, T.FLOAT32),
            "drift_distance": (int(self.drift_distance), T.UINT32, None),
        }
        if not self.slow_pairs:
            del md["pairs"]  # GGUF arrays cannot be empty
        return {KEY_PREFIX + k: v for k, v in md.items()}


def _freq_factors(reader, layer: int) -> np.ndarray | None:
    """llama.cpp's per-pair frequency divisors (``rope_freqs``), if the model has them."""
    tensors = {t.name: t for t in reader.tensors if t.name.endswith("rope_freqs.weight")}
    for name in (f"blk.{layer}.rope_freqs.weight", "rope_freqs.weight"):
        t = tensors.get(name)
        if t is not None:
            if t.tensor_type.name not in ("F32", "F16"):
                raise CenterError(f"{name} is {t.tensor_type.name}; expected F32/F16")
            return np.asarray(t.data, dtype=np.float64).reshape(-1)
    return None


def slow_mask(rope: Rope, ctx: int, freq_factors: np.ndarray | None = None) -> tuple[np.ndarray, list[int], np.ndarray]:
    """(mask over one head's dims to zero, slow pair indices, period of every pair)."""
    periods = rope.periods(freq_factors)
    slow = [int(i) for i in np.nonzero(periods > ctx)[0]]
    mask = np.zeros(rope.head_dim, dtype=bool)
    for i in slow:
        a, b = rope.pair_dims(i)
        mask[a] = mask[b] = True
    mask[rope.n_rot:] = True  # not rotated: exactly constant
    return mask, slow, periods


def removed_drift(rope: Rope, heads: np.ndarray, slow: list[int], periods: np.ndarray, distance: int) -> float:
    """How far from constant the removed part is: the largest norm of (R(d) - I)·b_removed
    over distances 0 <= d <= ``distance``, all KV heads together (``heads``: n_kv x head_dim
    bias; R(d) = RoPE rotation by d tokens). Pair i moves by 2|sin(θ_i·d/2)|·|b_i|;
    unrotated dims do not move. For a query q, the change of each logit differs from one
    common shift (which softmax ignores) by at most |q|·drift·(attention scale)."""
    if not slow:
        return 0.0
    e = np.zeros(len(slow))
    for j, i in enumerate(slow):
        a, c = rope.pair_dims(i)
        e[j] = float((heads[:, a] ** 2 + heads[:, c] ** 2).sum())
    theta = 2.0 * np.pi / np.asarray(periods, dtype=np.float64)[slow]
    d = np.arange(0, distance + 1, max(1, distance // 4096), dtype=np.float64)
    d[-1] = distance
    moved = (2.0 * np.sin(np.outer(d, theta) / 2.0)) ** 2 @ e
    return float(np.sqrt(moved.max()))


def plan_center(path: str | os.PathLike, ctx: int | None = None) -> CenterPlan:
    """Read ``path`` and work out what centering removes; raises CenterError on bad input.

    A model without ``attn_k.bias`` (or whose bias has no slow components at ``ctx``) gives
    a plan with ``nothing_to_do`` set.
    """
    path = Path(path)
    reader = open_gguf(path)
    arch = _field_value(reader, "general.architecture")
    if not arch:
        raise CenterError(f"{path} has no general.architecture: not a model GGUF")
    arch = str(arch)
    done = sorted(k for k in reader.fields if k.startswith(KEY_PREFIX))
    if done:
        c = _field_value(reader, KEY_PREFIX + "ctx")
        raise CenterError(f"{path.name} is already K-centered (has {done[0]}"
                          + (f", ctx {c}" if c is not None else "") + "); center the original file instead")
    names = [t.name for t in reader.tensors]
    if not any(_ATTN_RE.match(n) for n in names):
        raise CenterError(f"{path.name} has no attention layers (no blk.N.attn_* tensors; arch {arch!r})")
    plan = CenterPlan(path=path, arch=arch, reader=reader)
    biases = [(int(m.group(1)), t) for t in reader.tensors if (m := _K_BIAS_RE.match(t.name))]
    if not biases:
        if any(re.match(r"^blk\.\d+\.attn_qkv\.bias$", n) for n in names):
            raise CenterError(f"{path.name} carries its K bias inside a fused attn_qkv.bias (arch {arch!r}); "
                              "`center` handles separate attn_k.bias tensors only")
        plan.nothing_to_do = f"no attn_k.bias in {path.name} (arch {arch}): keys carry no constant bias"
        return plan
    for _, t in biases:
        if t.tensor_type.name not in ("F32", "F16"):
            raise CenterError(f"{t.name} is {t.tensor_type.name}: only F32/F16 biases are supported "
                              "(a quantized bias cannot be edited exactly)")
    rope = rope_of(reader, path, arch=arch)
    plan.rope = rope
    if ctx is None:
        if not rope.n_ctx_train:
            raise CenterError(f"{arch}.context_length is missing: pass --ctx")
        ctx = rope.n_ctx_train
    if ctx < 1:
        raise CenterError(f"--ctx must be positive (got {ctx})")
    plan.ctx = int(ctx)
    plan.unrotated_dims = rope.head_dim - rope.n_rot
    # the drift is reported over the model's own context, so runs with different --ctx compare
    plan.drift_distance = int(rope.n_ctx_train or plan.ctx)

    for layer, t in sorted(biases, key=lambda x: x[0]):
        mask, slow, periods = slow_mask(rope, plan.ctx, _freq_factors(reader, layer))
        if plan.periods is None:  # the same for every layer unless blk.N.rope_freqs differ
            plan.slow_pairs, plan.periods = slow, periods
        data = np.asarray(t.data)
        flat = data.reshape(-1)
        if flat.size % rope.head_dim:
            raise CenterError(f"{t.name} has {flat.size} values, not a multiple of the head dim {rope.head_dim}")
        n_kv = flat.size // rope.head_dim
        full = np.tile(mask, n_kv)
        b = flat.astype(np.float64)
        new = flat.copy()
        new[full] = 0
        drift = removed_drift(rope, b.reshape(n_kv, rope.head_dim), slow, periods, plan.drift_distance)
        plan.layers.append(LayerPlan(
            layer=layer, tensor=t.name, n_head_kv=n_kv, pairs_removed=len(slow) * n_kv,
            dims_removed=int(full.sum()), norm_before=float(np.linalg.norm(b)),
            norm_removed=float(np.linalg.norm(b[full])),
            norm_after=float(np.linalg.norm(new.astype(np.float64))), drift=drift,
            new_data=new.reshape(data.shape)))
    if all(p.dims_removed == 0 for p in plan.layers):
        plan.nothing_to_do = (f"no RoPE pair of {path.name} has a period above {plan.ctx} tokens and every "
                              "dim is rotated: nothing to remove")
    elif all(p.norm_removed == 0 for p in plan.layers):
        plan.nothing_to_do = f"the slow components of every attn_k.bias in {path.name} are already zero"
    return plan


# ----------------------------------------------------------------------------- writing

def check_output(src: str | os.PathLike, out: str | os.PathLike, *, force: bool = False) -> Path:
    """CenterError if ``out`` is the input or exists (without ``force``) or is a directory."""
    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve() or (out.exists() and src.exists() and os.path.samefile(out, src)):
        raise CenterError(f"output {out} is the input file; write the centered model to a new file")
    if out.is_dir():
        raise CenterError(f"output {out} is a directory")
    if out.exists() and not force:
        raise CenterError(f"output {out} exists (use --force to overwrite)")
    if not out.parent.exists():
        raise CenterError(f"output directory {out.parent} does not exist")
    return out


def _copy_value(f) -> tuple[Any, Any, Any]:
    """(value, type, sub_type) reproducing a reader field byte for byte."""
    from gguf import GGUFValueType as T

    vtype = f.types[0]
    if vtype == T.STRING:
        return bytes(f.parts[-1]), vtype, None
    if vtype == T.ARRAY:
        sub = f.types[-1]
        if len(f.types) != 2:
            raise CenterError(f"KV field {f.name} is a nested array: not supported")
        if not f.data:
            raise CenterError(f"KV field {f.name} is an empty array: the gguf writer cannot copy it")
        if sub == T.STRING:
            return [bytes(f.parts[i]) for i in f.data], vtype, sub
        return f.contents(), vtype, sub
    return f.contents(), vtype, None


def write_centered(plan: CenterPlan, out: str | os.PathLike) -> Path:
    """Write the centered copy of ``plan.path`` to ``out`` (atomically: temp file + rename)."""
    from gguf import GGUFWriter, Keys

    if plan.nothing_to_do or plan.rope is None:
        raise CenterError(plan.nothing_to_do or "nothing planned")
    reader = plan.reader
    out = Path(out)
    new = {p.tensor: p.new_data for p in plan.layers}
    with atomic_output(out, suffix=".tmp") as tmp:
        w = GGUFWriter(tmp, plan.arch, endianess=reader.endianess)
        w.data_alignment = int(reader.alignment)
        for f in reader.fields.values():
            if f.name.startswith("GGUF.") or f.name == Keys.General.ARCHITECTURE:
                continue  # header pseudo-fields; the writer adds the architecture itself (first)
            w.add_key_value(f.name, *_copy_value(f))
        for key, (val, vtype, sub) in plan.metadata().items():
            w.add_key_value(key, val, vtype, sub_type=sub)
        for t in reader.tensors:
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in reader.tensors:
            data = new.get(t.name, t.data)
            assert data.dtype == t.data.dtype and data.nbytes == t.data.nbytes
            w.write_tensor_data(data, tensor_endianess=reader.endianess)
        w.close()
    return out

