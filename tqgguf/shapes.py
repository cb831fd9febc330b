"""Real model shapes without downloads: random-weight GGUF files for speed measurements.

A *shape* is what a model's ``config.json`` says about its tensors — layers, width, heads,
KV heads, head dim, FFN width, vocabulary, RoPE, norms, biases, sliding-window layers —
with none of its weights. :func:`write_shape` writes a GGUF of that shape that llama.cpp
loads as the real model's architecture (the tensor names, ggml shapes and metadata keys of
``src/models/<arch>.cpp``'s ``load_arch_hparams``/``load_arch_tensors`` in the pinned
llama.cpp), filled with random weights. Decoding it costs what decoding the real model
costs (the same bytes are read, the same kernels run); its outputs mean nothing.

So every such file says it is **speed only**: the GGUF key ``tqgguf.speed_only = true``
(:data:`SPEED_ONLY_KEY`), ``general.name`` ending in "(random weights, speed only)", and
``tqgguf.shape`` naming the registry entry. ``tqgguf ppl``/``sweep``/``mix`` refuse such a
file (tqgguf.models.refuse_speed_only); ``tqgguf bench`` marks its rows.

What is written, per tensor (``weight_type`` = q4_0 by default):

- 2-D weights (embeddings, attention, FFN, output): ``weight_type`` blocks. q4_0 and q8_0
  get random quants and one f16 scale per tensor, ``d = 1 / (std(q) · sqrt(ne0))`` (std of a
  uniform nibble minus 8: 4.61; of a uniform int8: 73.9), so a row times a unit-RMS input
  has RMS ≈ 1 and 32 layers stay finite; f16 gets N(0, 1/ne0) values. The random block
  pattern is generated once (16 MiB) and repeated: every byte is still read by a decode.
- norms: f32 ones; biases (Qwen2's Q/K/V): f32 N(0, 0.02²); Llama 3's ``rope_freqs``:
  f32, computed from the config's ``rope_scaling`` as convert_hf_to_gguf.py does.
- tokenizer: a minimal SentencePiece ("llama") vocabulary of exactly ``n_vocab`` tokens
  (``<unk>``, ``<s>``, ``</s>``, the 256 byte tokens ``<0x00>``..``<0xFF>``, then ``▁tN``), so
  llama.cpp, llama-bench and llama_cpp load it and tokenize; BOS 1, EOS 2, add BOS.

Imports numpy, ``gguf`` and tqgguf's leaf modules only (tests/test_architecture.py checks
it), so ``scripts/gpu/write_shape.py`` runs on a machine whose Python has nothing else.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fsutil import atomic_output

#: The GGUF key that marks a random-weight file (bool true); its presence is what refuses ppl.
SPEED_ONLY_KEY = "tqgguf.speed_only"
#: The registry name of the shape a file was written from (string).
SHAPE_KEY = "tqgguf.shape"
#: Bumped when :func:`write_shape` writes different bytes for the same arguments (cache names carry it).
WRITER_VERSION = 1
#: What ``general.name`` ends with.
SPEED_ONLY_NAME = "random weights, speed only"

#: weight types :func:`write_shape` writes: name -> (values per block, bytes per block).
WEIGHT_TYPES: dict[str, tuple[int, int]] = {"q4_0": (32, 18), "q8_0": (32, 34), "f16": (1, 2)}
#: std of the stored integer of a random block value: q4_0 nibble - 8 (uniform over -8..7),
#: q8_0 int8 (uniform over -128..127).
_QUANT_STD = {"q4_0": math.sqrt((16 ** 2 - 1) / 12), "q8_0": math.sqrt((256 ** 2 - 1) / 12)}


class ShapeError(ValueError):
    """An unknown shape name, weight type or layer count; the message lists what is allowed."""


@dataclass(frozen=True)
class Shape:
    """One registry entry: the config.json values of a real model (``source`` names it).

    Sizes are counts (heads, elements), ``norm_eps`` the RMS norm epsilon, ``rope_theta``
    the RoPE base. ``rope_scaling``: None, ``("llama3", factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings)`` (written as a ``rope_freqs``
    tensor) or ``("linear", factor)`` (written as ``rope.scaling.*`` keys). ``qkv_bias``:
    Q/K/V projections carry biases (Qwen2). ``tied_embeddings``: no ``output.weight``
    (llama.cpp reuses ``token_embd``). ``sliding_window`` > 0: sliding-window attention of
    that many tokens on the layers llama.cpp's pattern marks (gemma3: ``swa_pattern`` 6,
    5 window layers then 1 global), with RoPE base ``rope_theta_swa`` there.
    ``layers_of_source``: the source model's layer count when ``n_layer`` is a slice of it.
    """

    name: str
    arch: str
    source: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    context_length: int
    rope_theta: float
    norm_eps: float
    rope_scaling: tuple | None = None
    qkv_bias: bool = False
    tied_embeddings: bool = False
    sliding_window: int = 0
    swa_pattern: int = 0
    rope_theta_swa: float = 0.0
    layers_of_source: int = 0
    description: str = field(default="", compare=False)

    def swa_layers(self, n_layer: int | None = None) -> list[int]:
        """Indices of the sliding-window layers among ``n_layer`` (default: all): llama.cpp's
        ``set_swa_pattern(n_pattern)`` rule, layer il is a window layer when il % n_pattern
        < n_pattern - 1; [] without a window."""
        n = self.n_layer if n_layer is None else n_layer
        if not self.sliding_window:
            return []
        return [il for il in range(n) if il % self.swa_pattern < self.swa_pattern - 1]


_LLAMA3_8B = "meta-llama/Llama-3.1-8B config.json"
SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("llama-3.1-8b", "llama", _LLAMA3_8B + ": hidden_size 4096, num_hidden_layers 32, num_attention_heads 32, "
          "num_key_value_heads 8, head_dim 128, intermediate_size 14336, vocab_size 128256, rope_theta 500000, "
          "rms_norm_eps 1e-5, max_position_embeddings 131072, rope_scaling llama3 (factor 8, low_freq_factor 1, "
          "high_freq_factor 4, original_max_position_embeddings 8192), tie_word_embeddings false",
          n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=14336, n_vocab=128256,
          context_length=131072, rope_theta=500000.0, norm_eps=1e-5, rope_scaling=("llama3", 8.0, 1.0, 4.0, 8192),
          description="Llama-3.1-8B: 32 layers, 32 Q / 8 KV heads of 128"),
    Shape("llama-3.2-1b", "llama", "meta-llama/Llama-3.2-1B config.json: hidden_size 2048, num_hidden_layers 16, "
          "num_attention_heads 32, num_key_value_heads 8, head_dim 64, intermediate_size 8192, vocab_size 128256, "
          "rope_theta 500000, rms_norm_eps 1e-5, max_position_embeddings 131072, rope_scaling llama3 (factor 32, "
          "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192), tie_word_embeddings true",
          n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, head_dim=64, n_ff=8192, n_vocab=128256,
          context_length=131072, rope_theta=500000.0, norm_eps=1e-5, rope_scaling=("llama3", 32.0, 1.0, 4.0, 8192),
          tied_embeddings=True, description="Llama-3.2-1B: 16 layers, 32 Q / 8 KV heads of 64, tied embeddings"),
    Shape("qwen2.5-7b", "qwen2", "Qwen/Qwen2.5-7B config.json: hidden_size 3584, num_hidden_layers 28, "
          "num_attention_heads 28, num_key_value_heads 4 (head dim 3584/28 = 128), intermediate_size 18944, "
          "vocab_size 152064, rope_theta 1000000, rms_norm_eps 1e-6, max_position_embeddings 131072, "
          "use_sliding_window false, tie_word_embeddings false; Q/K/V biases (Qwen2 attention)",
          n_layer=28, n_embd=3584, n_head=28, n_head_kv=4, head_dim=128, n_ff=18944, n_vocab=152064,
          context_length=131072, rope_theta=1000000.0, norm_eps=1e-6, qkv_bias=True,
          description="Qwen2.5-7B: 28 layers, 28 Q / 4 KV heads of 128 (GQA 7), Q/K/V biases"),
    Shape("gemma-3-4b", "gemma3", "google/gemma-3-4b-it config.json (text_config): hidden_size 2560, "
          "num_hidden_layers 34, num_attention_heads 8, num_key_value_heads 4, head_dim 256, intermediate_size 10240, "
          "vocab_size 262208, rope_theta 1000000, rope_local_base_freq 10000, rope_scaling linear factor 8, "
          "sliding_window 1024, sliding_window_pattern 6, rms_norm_eps 1e-6, max_position_embeddings 131072, "
          "query_pre_attn_scalar 256 (= head_dim: llama.cpp's default scale), tied embeddings",
          n_layer=34, n_embd=2560, n_head=8, n_head_kv=4, head_dim=256, n_ff=10240, n_vocab=262208,
          context_length=131072, rope_theta=1000000.0, norm_eps=1e-6, rope_scaling=("linear", 8.0),
          tied_embeddings=True, sliding_window=1024, swa_pattern=6, rope_theta_swa=10000.0,
          description="Gemma-3-4B: 34 layers, 8 Q / 4 KV heads of 256, 5 of 6 layers a 1024-token window"),
    Shape("llama-3.1-70b-slice", "llama", "meta-llama/Llama-3.1-70B config.json: hidden_size 8192, "
          "num_hidden_layers 80 (8 written: a slice), num_attention_heads 64, num_key_value_heads 8, head_dim 128, "
          "intermediate_size 28672, vocab_size 128256, rope_theta 500000, rms_norm_eps 1e-5, "
          "max_position_embeddings 131072, rope_scaling llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, "
          "original_max_position_embeddings 8192), tie_word_embeddings false",
          n_layer=8, n_embd=8192, n_head=64, n_head_kv=8, head_dim=128, n_ff=28672, n_vocab=128256,
          context_length=131072, rope_theta=500000.0, norm_eps=1e-5, rope_scaling=("llama3", 8.0, 1.0, 4.0, 8192),
          layers_of_source=80,
          description="Llama-3.1-70B's layer (64 Q / 8 KV heads of 128, FFN 28672), 8 of its 80 layers"),
)}


def _unknown(what: str, value: object, allowed) -> ShapeError:
    return ShapeError(f"unknown {what} {value!r}; allowed: {', '.join(allowed)}")


def get_shape(name: str) -> Shape:
    """The registry entry ``name`` (case-insensitive). Raises ShapeError listing the names."""
    shape = SHAPES.get(str(name).strip().lower())
    if shape is None:
        raise _unknown("shape", name, SHAPES)
    return shape


@dataclass(frozen=True)
class TensorPlan:
    """One tensor to write: GGUF name, ggml shape (ne0 first: ne0 is the input dimension of a
    weight, as llama.cpp's ``create_tensor`` lists it), ggml type name, and what fills it:
    ``weight`` (random blocks), ``norm`` (ones), ``bias`` (small normal), ``rope_freqs``."""

    name: str
    ne: tuple[int, ...]
    type: str
    fill: str

    @property
    def n_elements(self) -> int:
        return math.prod(self.ne)

    @property
    def nbytes(self) -> int:
        per, size = WEIGHT_TYPES.get(self.type, (1, 4))  # f32 otherwise
        return self.n_elements // per * size


def tensor_plan(shape: Shape, n_layers: int | None = None, weight_type: str = "q4_0") -> list[TensorPlan]:
    """Every tensor of ``shape`` with ``n_layers`` layers (default ``shape.n_layer``), in file
    order: the tensors llama.cpp's loader creates for the architecture (required ones, and the
    optional ones the real model's GGUF has: Qwen2's biases, Llama 3's ``rope_freqs``)."""
    n = shape.n_layer if n_layers is None else n_layers
    e, hd, q, kv, ff = shape.n_embd, shape.head_dim, shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim, shape.n_ff
    w = weight_type

    def W(name, *ne):
        return TensorPlan(name, ne, w, "weight")

    def N(name, dim):
        return TensorPlan(name, (dim,), "f32", "norm")

    out = [W("token_embd.weight", e, shape.n_vocab)]
    if shape.rope_scaling and shape.rope_scaling[0] == "llama3":
        out.append(TensorPlan("rope_freqs.weight", (hd // 2,), "f32", "rope_freqs"))
    out.append(N("output_norm.weight", e))
    if not shape.tied_embeddings:
        out.append(W("output.weight", e, shape.n_vocab))
    for i in range(n):
        b = f"blk.{i}."
        out.append(N(b + "attn_norm.weight", e))
        out += [W(b + "attn_q.weight", e, q), W(b + "attn_k.weight", e, kv), W(b + "attn_v.weight", e, kv)]
        if shape.qkv_bias:
            out += [TensorPlan(b + f"attn_{x}.bias", (d,), "f32", "bias") for x, d in (("q", q), ("k", kv), ("v", kv))]
        out.append(W(b + "attn_output.weight", q, e))
        if shape.arch == "gemma3":
            out += [N(b + "attn_q_norm.weight", hd), N(b + "attn_k_norm.weight", hd), N(b + "post_attention_norm.weight", e)]
        out.append(N(b + "ffn_norm.weight", e))
        out += [W(b + "ffn_gate.weight", e, ff), W(b + "ffn_up.weight", e, ff), W(b + "ffn_down.weight", ff, e)]
        if shape.arch == "gemma3":
            out.append(N(b + "post_ffw_norm.weight", e))
    return out


def llama3_rope_factors(head_dim: int, theta: float, factor: float, low: float, high: float, old_ctx: int) -> np.ndarray:
    """Llama 3's per-frequency RoPE factors (f32, head_dim/2 values), as
    convert_hf_to_gguf.py's LlamaModel computes the ``rope_freqs`` tensor from ``rope_scaling``:
    1 for wavelengths under old_ctx/high, ``factor`` over old_ctx/low, interpolated between."""
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _tokenizer(n_vocab: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A SentencePiece vocabulary of n_vocab tokens: tokens, scores (f32), token types (i32;
    gguf.TokenType: 1 normal, 2 unknown, 3 control, 6 byte)."""
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    toks += [f"\u2581t{i}" for i in range(n_vocab - len(toks))]
    types = np.ones(n_vocab, dtype=np.int32)
    types[0], types[1:3], types[3:259] = 2, 3, 6
    scores = -np.arange(n_vocab, dtype=np.float32)
    return toks, scores, types


_FILE_TYPE = {"q4_0": 2, "q8_0": 7, "f16": 1}  # llama_ftype LLAMA_FTYPE_MOSTLY_*
_CHUNK_BLOCKS = 1 << 20  # blocks per generated chunk: 18 MiB of q4_0, 34 MiB of q8_0, 2 MiB of f16


class _Filler:
    """Random weight bytes by the chunk: one block pattern per weight type, the f16 scale set
    per tensor width (see the module doc)."""

    def __init__(self, weight_type: str, seed: int) -> None:
        self.type = weight_type
        self.rng = np.random.default_rng(seed)
        per, size = WEIGHT_TYPES[weight_type]
        n = _CHUNK_BLOCKS * (8 if weight_type == "f16" else 1)
        if weight_type == "f16":
            self.buf = self.rng.standard_normal(n, dtype=np.float32).astype(np.float16)
        else:
            self.buf = np.empty(n, dtype=[("d", "<f2"), ("qs", "u1", (size - 2,))])
            self.buf["qs"] = self.rng.integers(0, 256, size=(n, size - 2), dtype=np.uint8)
        self.width = None

    def chunk(self, ne0: int) -> memoryview:
        if ne0 != self.width:
            if self.type == "f16":
                self.data = (self.buf.astype(np.float32) / math.sqrt(ne0)).astype(np.float16)
            else:
                self.buf["d"] = np.float16(1.0 / (_QUANT_STD[self.type] * math.sqrt(ne0)))
                self.data = self.buf
            self.width = ne0
        return memoryview(self.data.view(np.uint8))

    def write(self, f, t: TensorPlan) -> None:
        left = t.nbytes
        while left:
            mv = self.chunk(t.ne[0])
            n = min(left, len(mv))
            f.write(mv[:n])
            left -= n


def write_shape(name: str, path: str | os.PathLike, *, weight_type: str = "q4_0", n_layers: int | None = None,
                seed: int = 0, n_vocab: int | None = None) -> Path:
    """Write the random-weight GGUF of registry shape ``name`` to ``path``; return ``path``.

    ``weight_type``: q4_0 (default), q8_0 or f16 for every 2-D weight (norms, biases and
    ``rope_freqs`` are f32). ``n_layers``: how many layers (default the shape's; fewer make a
    small file of the same width, e.g. 2 for a test); the GGUF's block count says it. ``n_vocab``:
    another vocabulary size (default the shape's; for measuring the output layer's and the
    logits' share of a decode step). The file
    is written through a temp file in ``path``'s directory and renamed into place when whole
    (a crash leaves no partial ``path``); tensor data goes out in chunks of at most 34 MiB, so
    memory stays small whatever the file size (Llama-3.1-8B in q4_0: 4.66 GB). Deterministic
    for the same arguments. Raises ShapeError for an unknown name or weight type (the
    message lists the allowed ones), n_layers < 1 or n_vocab < 259; OSError when ``path`` cannot
    be written.
    """
    import dataclasses

    import gguf

    shape = get_shape(name)
    if n_vocab is not None:
        if int(n_vocab) < 259:
            raise ShapeError(f"n_vocab {n_vocab}: the vocabulary needs at least 259 tokens "
                             "(<unk>, <s>, </s> and the 256 byte tokens)")
        shape = dataclasses.replace(shape, n_vocab=int(n_vocab))
    weight_type = str(weight_type).strip().lower()
    if weight_type not in WEIGHT_TYPES:
        raise _unknown("weight type", weight_type, WEIGHT_TYPES)
    n = shape.n_layer if n_layers is None else int(n_layers)
    if n < 1:
        raise ShapeError(f"n_layers {n_layers}: a shape needs at least 1 layer")
    path = Path(path)
    plan = tensor_plan(shape, n, weight_type)
    rng = np.random.default_rng(seed + 1)
    with atomic_output(path) as tmp:
        w = gguf.GGUFWriter(str(tmp), shape.arch)
        try:
            _metadata(w, shape, n, weight_type)
            for t in plan:
                w.add_tensor_info(t.name, tuple(reversed(t.ne)), np.dtype(np.float32), t.nbytes,
                                  raw_dtype=gguf.GGMLQuantizationType[t.type.upper()])
            w.write_header_to_file()  # counts every key, the vocabulary's too
            vocab = {k: w.kv_data[0].pop(k) for k in list(w.kv_data[0]) if k in _VOCAB_ARRAYS}
            w.write_kv_data_to_file()
            f = w.fout[0]
            for key, val in vocab.items():  # gguf's writer packs arrays item by item: 4 s for 262k tokens
                f.write(_pack_array(key, val.value))
            w.write_ti_data_to_file()
            filler = _Filler(weight_type, seed)
            for t in plan:
                w.write_padding(f, f.tell())
                if t.fill == "weight":
                    filler.write(f, t)
                elif t.fill == "norm":
                    f.write(np.ones(t.ne, dtype=np.float32).tobytes())
                elif t.fill == "bias":
                    f.write((rng.standard_normal(t.ne) * 0.02).astype(np.float32).tobytes())
                else:
                    _, factor, low, high, old = shape.rope_scaling
                    f.write(llama3_rope_factors(shape.head_dim, shape.rope_theta, factor, low, high, old).tobytes())
                w.write_padding(f, t.nbytes)
            f.flush()
        finally:
            w.close()
    return path


#: the tokenizer's big arrays and their item types (GGUF: 8 string, 6 f32, 5 i32), written by
#: :func:`_pack_array` instead of gguf's per-item packing
_VOCAB_ARRAYS = {"tokenizer.ggml.tokens": 8, "tokenizer.ggml.scores": 6, "tokenizer.ggml.token_type": 5}


def _pack_array(key: str, values: list) -> bytes:
    """One GGUF key-value pair holding an array of strings, f32 or i32 (GGUF v3 layout, ggml
    docs/gguf.md: key as u64 length + bytes, value type u32 = 9 (array), item type u32, count
    u64, items: strings as u64 length + UTF-8, numbers little-endian)."""
    import struct

    def string(s: str) -> bytes:
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    sub_type = _VOCAB_ARRAYS[key]
    head = string(key) + struct.pack("<IIQ", 9, sub_type, len(values))
    if sub_type == 8:
        return head + b"".join(string(v) for v in values)
    return head + np.asarray(values, dtype={6: "<f4", 5: "<i4"}[sub_type]).tobytes()


def _metadata(w, shape: Shape, n_layer: int, weight_type: str) -> None:
    a = shape.arch
    sliced = f", {n_layer} of {shape.layers_of_source or shape.n_layer} layers" if n_layer != shape.n_layer or shape.layers_of_source else ""
    w.add_name(f"{shape.name} shape{sliced} ({SPEED_ONLY_NAME})")
    w.add_description(f"tqgguf.shapes: {shape.source}. Random weights: for speed measurements only, "
                      "its outputs and perplexity mean nothing.")
    w.add_bool(SPEED_ONLY_KEY, True)
    w.add_string(SHAPE_KEY, shape.name)
    w.add_uint32("tqgguf.shape_writer_version", WRITER_VERSION)
    w.add_file_type(_FILE_TYPE[weight_type])
    w.add_quantization_version(2)
    w.add_context_length(shape.context_length)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_layer_norm_rms_eps(shape.norm_eps)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_theta)
    if shape.rope_scaling and shape.rope_scaling[0] == "linear":
        w.add_string(f"{a}.rope.scaling.type", "linear")
        w.add_float32(f"{a}.rope.scaling.factor", float(shape.rope_scaling[1]))
    if shape.sliding_window:
        w.add_uint32(f"{a}.attention.sliding_window", shape.sliding_window)
        w.add_uint32(f"{a}.attention.sliding_window_pattern", shape.swa_pattern)
        w.add_float32(f"{a}.rope.freq_base_swa", shape.rope_theta_swa)
    w.add_uint32(f"{a}.vocab_size", shape.n_vocab)
    toks, scores, types = _tokenizer(shape.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores.tolist())
    w.add_token_types(types.tolist())
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def shape_rows() -> list[dict]:
    """One dict per registry shape (name, arch, layers, width, heads, KV heads, head dim, FFN,
    vocab, window, description, source) for listings."""
    return [{"name": s.name, "arch": s.arch, "n_layer": s.n_layer, "n_embd": s.n_embd, "n_head": s.n_head,
             "n_head_kv": s.n_head_kv, "head_dim": s.head_dim, "n_ff": s.n_ff, "n_vocab": s.n_vocab,
             "sliding_window": s.sliding_window, "description": s.description, "source": s.source}
            for s in SHAPES.values()]
