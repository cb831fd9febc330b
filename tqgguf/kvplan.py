"""Per-layer KV cache types ("layer plans"): ``--kv-boundary``, ``--kv-swa``, ``--kv-plan``.

llama.cpp gives every layer the same K type and the same V type (``-ctk/-ctv``). A layer
plan overrides them for chosen layers. The patched engine reads it from ``LLAMA_KV_PLAN``
when a KV cache is created (``native/src/llama-tq-plan.h``, patch 0009), so llama.cpp's own
tools built from the tree honour it too; this module turns what a user writes into that
value and checks it against the model first, so a bad plan is refused before loading.

What a user writes:

``--kv-boundary N[:K/V]``
    the first N and the last N layers at K/V (default q8_0/q8_0): vLLM keeps the first
    and last two layers of a dense model unquantized by default, since they are the most
    sensitive to cache error (vllm ``kv_cache_dtype_skip_layers``).
``--kv-swa K/V``
    every sliding-window layer at K/V (a sliding-window layer's cache is capped at its
    window, so f16 there costs little memory at long context); one type ``T`` means T/T.
``--kv-plan MAP`` or ``--kv-plan FILE``
    an explicit map ``0-1,22-23:q8_0/q8_0;5:f16/f16`` (the engine grammar, below), or a
    plan file written by ``tqgguf mix`` (JSON with the map, the model's sha256 and layer
    count; a file made for another model is refused).

The engine grammar (``LLAMA_KV_PLAN``): ``ENTRY[;ENTRY...]``, ``ENTRY = SELECTOR:K/V``,
``SELECTOR = swa`` or layer ranges ``N`` / ``A-B`` joined by commas. Explicit layers win
over ``swa``; layers nobody names keep ``-ctk/-ctv``; overlapping ranges are refused.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .cachetypes import CacheTypeError, check_cache_type, is_quantized
from .fsutil import sha256_file_cached

#: the variable the engine reads (native/src/llama-tq-plan.h)
ENGINE_VAR = "LLAMA_KV_PLAN"
#: what --kv-boundary gives the boundary layers when no K/V is named
BOUNDARY_DEFAULT = ("q8_0", "q8_0")
PLAN_FORMS = ("a map ENTRY[;ENTRY...] with ENTRY = LAYERS:K/V, LAYERS = swa or layer indices N or A-B joined "
              "by commas (e.g. 0-1,22-23:q8_0/q8_0), or a plan file written by `tqgguf mix`")
PLAN_FILE_FORMAT = "tqgguf-kv-plan/1"


class KVPlanError(ValueError):
    """A layer plan that is malformed or does not fit the model; the message says what and
    what is allowed."""


class GGUFReadError(KVPlanError):
    """The model file is not a readable GGUF (missing magic, truncated, corrupt header)."""


@dataclass(frozen=True)
class Entry:
    """One plan entry: ``ranges`` (inclusive (first, last) layer pairs; empty = the
    sliding-window layers) get K type ``k`` and V type ``v`` (ggml names)."""

    ranges: tuple[tuple[int, int], ...]
    k: str
    v: str

    @property
    def swa(self) -> bool:
        return not self.ranges

    def __str__(self) -> str:
        sel = "swa" if self.swa else ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges)
        return f"{sel}:{self.k}/{self.v}"


def parse_pair(value: str, what: str) -> tuple[str, str]:
    """``K/V`` -> (K, V); a single type ``T`` means (T, T). Raises KVPlanError naming
    ``what`` and the allowed type names."""
    parts = [p.strip() for p in str(value).split("/")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not all(parts):
        raise KVPlanError(f"{what} {value!r}: give K/V, two cache type names joined by '/' (e.g. q8_0/q8_0), "
                          "or one type for both")
    try:
        return check_cache_type(parts[0], f"K cache type in {what}"), check_cache_type(parts[1], f"V cache type in {what}")
    except CacheTypeError as e:
        raise KVPlanError(str(e)) from None


def parse_map(value: str, what: str = "--kv-plan") -> list[Entry]:
    """Parse an explicit map (the engine grammar, see the module docstring).

    Raises KVPlanError for a syntax error, an unknown type, two ``swa`` entries or
    overlapping layer ranges, naming the entry.
    """
    entries: list[Entry] = []
    for raw in str(value).split(";"):
        e = raw.strip()
        if not e:
            continue
        sel, colon, types = e.rpartition(":")
        if not colon or not sel.strip():
            raise KVPlanError(f"{what} entry {e!r} has no LAYERS:K/V form; allowed: {PLAN_FORMS}")
        k, v = parse_pair(types, f"{what} entry {e!r}:")
        if types.count("/") != 1:
            raise KVPlanError(f"{what} entry {e!r}: a map entry names K/V explicitly (e.g. q8_0/q8_0)")
        sel = sel.strip()
        if sel == "swa":
            if any(x.swa for x in entries):
                raise KVPlanError(f"{what}: 'swa' is given twice (entry {e!r}); give sliding-window layers one K/V pair")
            entries.append(Entry((), k, v))
            continue
        ranges = []
        for r in sel.split(","):
            m = re.fullmatch(r"\s*(\d{1,9})\s*(?:-\s*(\d{1,9})\s*)?", r)
            if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise KVPlanError(f"{what} entry {e!r}: {r.strip()!r} is not a layer range (N or A-B with A <= B); "
                                  f"allowed: {PLAN_FORMS}")
            a = int(m.group(1))
            ranges.append((a, int(m.group(2)) if m.group(2) is not None else a))
        entries.append(Entry(tuple(ranges), k, v))
    check_overlap(entries, what)
    return entries


def check_overlap(entries: list[Entry], what: str) -> None:
    """Raise KVPlanError when two layer ranges of ``entries`` share a layer."""
    spans = sorted((a, b, str(e)) for e in entries for a, b in e.ranges)
    for (a0, b0, e0), (a1, b1, e1) in zip(spans, spans[1:]):
        if a1 <= b0:
            raise KVPlanError(f"{what}: layers {a0}-{b0} ({e0}) and {a1}-{b1} ({e1}) overlap; each layer may be "
                              "named once")


def parse_boundary(value: object) -> tuple[int, str, str]:
    """``N[:K/V]`` -> (N, K, V); K/V defaults to q8_0/q8_0; N = 0 means no boundary layers.
    Raises KVPlanError."""
    s = str(value).strip()
    n, colon, pair = s.partition(":")
    if not re.fullmatch(r"\d{1,6}", n.strip()):
        raise KVPlanError(f"--kv-boundary {s!r}: give N[:K/V], N = how many first and last layers (e.g. 2 or "
                          "2:q8_0/q8_0)")
    k, v = parse_pair(pair, f"--kv-boundary {s!r}:") if colon else BOUNDARY_DEFAULT
    return int(n), k, v


# ----------------------------------------------------------------------------- the model side

@dataclass(frozen=True)
class ModelLayers:
    """What a plan needs to know about a model, read from its GGUF header.

    n_layer: ``{arch}.block_count``; swa: the model declares a sliding window
    (``{arch}.attention.sliding_window``); k_bias_layers: how many layers carry an
    ``attn_k.bias`` tensor; head_k / head_v: per-head K/V dims; n_head_kv: KV heads (the
    first value when it varies by layer).
    """

    arch: str
    n_layer: int
    swa: bool
    k_bias_layers: int
    head_k: int
    head_v: int
    n_head_kv: int


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_header(model_path: str | os.PathLike) -> tuple[dict[str, object], list[str]]:
    """The scalar and string metadata of a GGUF file (arrays skipped) and its tensor names
    (:func:`read_tensor_infos` without the shapes and types)."""
    meta, infos = read_tensor_infos(model_path)
    return meta, [name for name, _, _ in infos]


def tensor_bytes(model_path: str | os.PathLike, type_sizes: dict[int, tuple[int, int]]) -> dict[str, int]:
    """Bytes of each tensor of a GGUF file by name: elements / block size x bytes per block,
    ``type_sizes`` mapping a ggml type id to (block size, type size) (tqgguf.cachetypes
    all_types(), read from the built library). Raises KVPlanError as :func:`read_header`, or
    for a type id ``type_sizes`` does not know."""
    _, infos = read_tensor_infos(model_path)
    out = {}
    for name, dims, t in infos:
        if t not in type_sizes:
            raise GGUFReadError(f"{model_path}: tensor {name} has ggml type {t}, unknown to the installed engine")
        block, size = type_sizes[t]
        out[name] = math.prod(dims) // block * size
    return out


def read_tensor_infos(model_path: str | os.PathLike) -> tuple[dict[str, object], list[tuple[str, tuple[int, ...], int]]]:
    """The scalar and string metadata of a GGUF file (arrays skipped) and its tensors as
    (name, dims with ne0 first, ggml type id).

    Reads the header only (GGUF v2/v3 layout, ggml docs/gguf.md). ``gguf.GGUFReader`` gives
    the same values but builds a numpy view for every item of every array; on a model with a
    262k-token vocabulary that takes a minute on a loaded 2-core machine, this takes well
    under a second. Raises KVPlanError for a file that is not a GGUF or is truncated.
    """
    import mmap
    import struct

    path = Path(model_path)
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[:4] != b"GGUF":
                raise GGUFReadError(f"{path}: not a GGUF file (no GGUF magic)")
            pos = 8
            n_tensors, n_kv = struct.unpack_from("<QQ", m, pos)
            pos += 16

            def string() -> str:
                nonlocal pos
                (n,) = struct.unpack_from("<Q", m, pos)
                pos += 8 + n
                return bytes(m[pos - n:pos]).decode("utf-8", "replace")

            def skip(t: int) -> None:
                nonlocal pos
                if t == 8:
                    string()
                elif t == 9:
                    et, cnt = struct.unpack_from("<IQ", m, pos)
                    pos += 12
                    if et in _SCALAR:
                        pos += struct.calcsize(_SCALAR[et]) * cnt
                    else:
                        for _ in range(cnt):
                            skip(et)
                else:
                    pos += struct.calcsize(_SCALAR[t])

            meta: dict[str, object] = {}
            for _ in range(n_kv):
                key = string()
                (t,) = struct.unpack_from("<I", m, pos)
                pos += 4
                if t in _SCALAR:
                    meta[key] = struct.unpack_from(_SCALAR[t], m, pos)[0]
                    skip(t)
                elif t == 8:
                    meta[key] = string()
                else:
                    skip(t)
            infos = []
            for _ in range(n_tensors):
                name = string()
                (nd,) = struct.unpack_from("<I", m, pos)
                dims = struct.unpack_from(f"<{nd}Q", m, pos + 4)
                (t,) = struct.unpack_from("<I", m, pos + 4 + 8 * nd)
                infos.append((name, tuple(int(d) for d in dims), int(t)))
                pos += 4 + 8 * nd + 4 + 8
            return meta, infos
    except (OSError, ValueError, struct.error, KeyError, OverflowError, MemoryError, IndexError) as e:
        if isinstance(e, KVPlanError):
            raise
        raise GGUFReadError(f"cannot read {path} as a GGUF ({type(e).__name__}: {e}); is it a complete .gguf file?") from None


def model_layers(model_path: str | os.PathLike) -> ModelLayers:
    """Read :class:`ModelLayers` from a GGUF header (:func:`read_header`; remembered per
    file path, size and mtime). Raises KVPlanError when the file is not a GGUF or has no
    block count."""
    p = Path(model_path)
    try:
        st = p.stat()
    except OSError as e:
        raise KVPlanError(f"cannot read {p}: {e.strerror or e}") from None
    return _model_layers(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _model_layers(model_path: str, _size: int, _mtime: int) -> ModelLayers:
    meta, names = read_header(model_path)
    arch = str(meta.get("general.architecture", ""))
    n_layer = meta.get(f"{arch}.block_count")
    if not n_layer:
        raise KVPlanError(f"{model_path}: no {arch}.block_count in the GGUF header; a layer plan needs the layer count")
    n_head = int(meta.get(f"{arch}.attention.head_count") or 1)
    n_embd = int(meta.get(f"{arch}.embedding_length") or 0)
    head_k = int(meta.get(f"{arch}.attention.key_length") or (n_embd // n_head))
    head_v = int(meta.get(f"{arch}.attention.value_length") or head_k)
    n_head_kv = int(meta.get(f"{arch}.attention.head_count_kv") or n_head)
    bias = sum(1 for t in names if re.fullmatch(r"blk\.\d+\.attn_k\.bias", t))
    swa = bool(meta.get(f"{arch}.attention.sliding_window"))
    return ModelLayers(arch, int(n_layer), swa, bias, head_k, head_v, n_head_kv)


# ----------------------------------------------------------------------------- plans

@dataclass(frozen=True)
class KVPlan:
    """A resolved plan: ``entries`` in engine order, ``source`` what the user gave (for
    messages), ``n_layer`` the model's layer count it was checked against."""

    entries: tuple[Entry, ...]
    n_layer: int
    source: str = ""
    file: Path | None = field(default=None, compare=False)

    def engine_value(self) -> str:
        """The ``LLAMA_KV_PLAN`` value ("" for an empty plan)."""
        return ";".join(str(e) for e in self.entries)

    def __str__(self) -> str:
        return self.engine_value()

    def types(self, ctk: str, ctv: str, swa_layers: set[int] | None = None) -> list[tuple[str, str]]:
        """K/V type names of every layer (``swa_layers``: indices of sliding-window layers,
        None = unknown, then ``swa`` entries are not applied; used for bits estimates)."""
        out = []
        for il in range(self.n_layer):
            pair = (ctk, ctv)
            hit = next((e for e in self.entries if any(a <= il <= b for a, b in e.ranges)), None)
            swa = next((e for e in self.entries if e.swa), None)
            if hit:
                pair = (hit.k, hit.v)
            elif swa and swa_layers is not None and il in swa_layers:
                pair = (swa.k, swa.v)
            out.append(pair)
        return out

    def keeps_defaults(self) -> bool:
        """True when some layer may keep -ctk/-ctv: the explicit ranges (which never
        overlap) do not name every layer, or a ``swa`` entry leaves the non-window layers
        to them."""
        covered = sum(b - a + 1 for e in self.entries for a, b in e.ranges)
        return covered < self.n_layer or any(e.swa for e in self.entries)

    def k_types(self, ctk: str) -> set[str]:
        """Every K type a layer may get (-ctk included when some layer keeps it)."""
        return {e.k for e in self.entries} | ({ctk} if self.keeps_defaults() else set())

    def v_types(self, ctv: str) -> set[str]:
        """Every V type a layer may get (-ctv included when some layer keeps it)."""
        return {e.v for e in self.entries} | ({ctv} if self.keeps_defaults() else set())


def read_plan_file(path: str | os.PathLike, model_path: str | os.PathLike) -> tuple[list[Entry], dict]:
    """Entries of a plan file (``tqgguf mix`` output), after checking it was made for this
    model file (sha256) and layer count. Raises KVPlanError naming both models."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise KVPlanError(f"--kv-plan {p}: not a readable plan file ({e}); allowed: {PLAN_FORMS}") from None
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FILE_FORMAT or "plan" not in doc:
        raise KVPlanError(f"--kv-plan {p}: not a tqgguf plan file (format {PLAN_FILE_FORMAT} with a 'plan' map)")
    want = doc.get("model_sha256")
    have = sha256_file_cached(model_path)
    if want != have:
        raise KVPlanError(f"--kv-plan {p} was made for {doc.get('model', '?')} (sha256 {str(want)[:12]}…), not for "
                          f"{Path(model_path).name} (sha256 {have[:12]}…); make one for this model with "
                          f"`tqgguf mix {Path(model_path).name} --bits B`")
    return parse_map(doc["plan"], f"--kv-plan {p}"), doc


def is_plan_file(value: str) -> bool:
    """True when a ``--kv-plan`` value names a file rather than a map."""
    v = str(value).strip()
    return v.endswith(".json") or (":" not in v and Path(os.path.expanduser(v)).is_file())


def parse_plan_axes(boundary: str = "0", swa: str = "none", maps: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """The layer-plan axis of ``tqgguf sweep`` and ``tqgguf bench``: every --kv-boundary
    (comma list of N[:K/V], 0 = none) × --kv-swa (comma list of K/V or T, none) × --kv-plan
    (each a map or file; none given = none) combination, as canonical (boundary, swa, map)
    texts ("" = not set). Raises KVPlanError for a malformed item or an empty list item."""
    def items(value: str, what: str) -> list[str]:
        out = [x.strip() for x in str(value).split(",")]
        if not str(value).strip() or any(not x for x in out):
            raise KVPlanError(f"{what}: empty list or empty item in {value!r}; give a comma list")
        return out

    bs = []
    for item in items(boundary, "--kv-boundary"):
        n, k, v = parse_boundary(item)
        bs.append(f"{n}:{k}/{v}" if n else "")
    ss = []
    for item in items(swa, "--kv-swa"):
        ss.append("" if item.lower() == "none" else "/".join(parse_pair(item, "--kv-swa")))
    ms = []
    for item in maps or ("none",):
        item = str(item).strip()
        ms.append("" if item.lower() == "none" else item if is_plan_file(item) else ";".join(map(str, parse_map(item))))
    return list(dict.fromkeys((b, s, m) for b in bs for s in ss for m in ms))


def plan_label(plan: tuple[str, str, str]) -> str:
    """A (boundary, swa, map) axis point as the flags that give it ("" = no plan)."""
    return " ".join(f"--kv-{n} {v}" for n, v in zip(("boundary", "swa", "plan"), plan) if v)


def build_plan(model_path: str | os.PathLike, *, boundary: object = None, swa: object = None,
               plan: object = None, layers: ModelLayers | None = None) -> KVPlan | None:
    """Resolve the user's plan options for ``model_path`` into one :class:`KVPlan` (None
    when none is given).

    Args:
        boundary: ``N[:K/V]`` (``--kv-boundary``); swa: ``K/V`` or ``T`` (``--kv-swa``);
        plan: an explicit map or a plan file path (``--kv-plan``); layers: the model's
        :class:`ModelLayers` (read from the file when None).
    Raises:
        KVPlanError: a malformed option, a layer the model does not have (a plan for
        another layer count), overlapping ranges (also between --kv-boundary and a map),
        a plan file of another model, or --kv-swa (or a map's 'swa' entry) on a model without
        sliding-window layers.
    """
    if boundary in (None, "", "0") and swa in (None, "", "none") and plan in (None, ""):
        return None
    layers = layers or model_layers(model_path)
    n = layers.n_layer
    entries: list[Entry] = []
    src: list[str] = []
    if boundary not in (None, "", "0"):
        nb, k, v = parse_boundary(boundary)
        if 2 * nb > n:
            raise KVPlanError(f"--kv-boundary {boundary}: the first and last {nb} layers overlap, "
                              f"{Path(model_path).name} has {n} layers; N can be at most {n // 2} "
                              f"(which already covers every layer; -ctk/-ctv set all layers)")
        if nb:
            ranges = [(0, n - 1)] if 2 * nb >= n else [(0, nb - 1), (n - nb, n - 1)]
            entries.append(Entry(tuple(ranges), k, v))
            src.append(f"--kv-boundary {boundary}")
    if plan not in (None, ""):
        if is_plan_file(str(plan)):
            path = Path(os.path.expanduser(str(plan).strip()))
            if not path.is_file():
                raise KVPlanError(f"--kv-plan {plan}: no such plan file; allowed: {PLAN_FORMS}")
            more, doc = read_plan_file(path, model_path)
            if doc.get("n_layer") not in (None, n):
                raise KVPlanError(f"--kv-plan {path}: the plan is for {doc['n_layer']} layers, this model has {n}")
        else:
            more = parse_map(str(plan))
        if not layers.swa and any(e.swa for e in more):
            raise KVPlanError(f"--kv-plan {plan}: a 'swa' entry, but {Path(model_path).name} ({layers.arch}) has no "
                              f"sliding-window layers")
        entries += more
        src.append(f"--kv-plan {plan}")
    if swa not in (None, "", "none"):
        if not layers.swa:
            raise KVPlanError(f"--kv-swa {swa}: {Path(model_path).name} ({layers.arch}) has no sliding-window layers")
        k, v = parse_pair(str(swa), "--kv-swa")
        if any(e.swa for e in entries):
            raise KVPlanError("--kv-swa and a 'swa' entry of --kv-plan both set the sliding-window layers; give one")
        entries.append(Entry((), k, v))
        src.append(f"--kv-swa {swa}")
    check_overlap(entries, " + ".join(src))
    for e in entries:
        for a, b in e.ranges:
            if b >= n:
                raise KVPlanError(f"{' + '.join(src)}: layer {b} is named, but {Path(model_path).name} has {n} layers "
                                  f"(0-{n - 1}); a plan made for another model does not fit")
    return KVPlan(tuple(entries), n, " + ".join(src))


def bits_per_value(types: list[tuple[str, str]], head_k: int, head_v: int, bits_of) -> float:
    """Average stored bits per K/V value of per-layer ``types`` ((K, V) names) with per-head
    dims ``head_k``/``head_v`` and ``bits_of(name) -> bits/value`` (tqgguf.cachetypes
    TypeInfo.bits_per_value). Every layer weighs by its values per token."""
    tot = sum(bits_of(k) * head_k + bits_of(v) * head_v for k, v in types)
    return tot / (len(types) * (head_k + head_v)) if types else 0.0


def kv_bytes_per_token(types: list[tuple[str, str]], layers: ModelLayers, row_bytes) -> int:
    """Exact bytes one token takes in the KV cache of every layer: per layer, a K row of
    n_head_kv · head_k values and a V row of n_head_kv · head_v values of that layer's
    (K, V) ``types``; ``row_bytes(name, n_values) -> bytes`` is ggml_row_size
    (tqgguf.cachetypes TypeInfo.row_bytes). The count llama.cpp allocates per cell when
    every layer holds every cell (its default, swa_full). SmolLM2-135M f16/f16: 30 layers ·
    2 · 3 heads · 64 · 2 bytes = 23040."""
    return sum(row_bytes(k, layers.n_head_kv * layers.head_k) + row_bytes(v, layers.n_head_kv * layers.head_v)
               for k, v in types)


def any_quantized_k(plan: KVPlan | None, ctk: str) -> bool:
    """True when some layer's K cache is quantized under ``plan`` and ``-ctk``."""
    return any(is_quantized(t) for t in (plan.k_types(ctk) if plan else {ctk}))
