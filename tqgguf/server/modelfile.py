"""A model file ``tqgguf serve`` can serve: the names clients may use for it and the GGUF
metadata the model routes show (``/api/show``, ``/api/tags``, ``/api/ps``, ``/v1/models``)
and the runners need (training context, block count, GQA, pooling, chat template), read
from the file's header only (:func:`read_gguf_metadata`)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ModelFile:
    """A servable model: the name clients use and its GGUF, with the metadata the model
    routes show (read once with ``gguf.GGUFReader``: scalar keys only)."""

    name: str
    path: Path
    _meta: dict[str, Any] | None = None
    #: the model's entry in Ollama's store (tqgguf.ollama_store.OllamaModel) when it came from there
    ollama: Any = None

    @property
    def tag(self) -> str:
        return self.name if ":" in self.name else f"{self.name}:latest"

    def names(self) -> set[str]:
        stem = self.path.stem
        return {n.lower() for n in (self.name, self.tag, self.name.removesuffix(":latest"), self.path.name, stem,
                                    f"{stem}:latest", str(self.path))}

    def metadata(self) -> dict[str, Any]:
        """The GGUF's metadata keys (see :func:`read_gguf_metadata`), read once."""
        if self._meta is None:
            self._meta = read_gguf_metadata(self.path)
        return self._meta

    def params(self) -> dict[str, Any]:
        """The Modelfile parameters the model comes with (Ollama's params layer: ``num_ctx``,
        ``stop``, ``temperature``...; Ollama's option names), the defaults under a request's
        ``options``; {} for a model that is not from Ollama's store."""
        return dict(self.ollama.params) if self.ollama is not None else {}

    def system(self) -> str:
        """The default system prompt (Ollama's system layer), "" when none."""
        return self.ollama.system if self.ollama is not None else ""

    def size(self) -> int:
        """Bytes on disk: an Ollama model's layers (as ``/api/tags`` reports them), else the file."""
        return int(self.ollama.size) if self.ollama is not None else self.path.stat().st_size

    @property
    def digest(self) -> str:
        if self.ollama is not None:  # Ollama's: the sha256 of the manifest
            return self.ollama.digest
        st = self.path.stat()
        # identifies the file version (path, size, mtime) without reading the whole file
        return hashlib.sha256(f"{self.path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()

    def details(self) -> dict[str, Any]:
        md = self.metadata()
        arch = str(md.get("general.architecture", "unknown"))
        return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
                "parameter_size": str(md.get("general.size_label", "")),
                "quantization_level": _ftype_name(md.get("general.file_type"))}

    def n_ctx_train(self) -> int:
        md = self.metadata()
        return int(md.get(f"{md.get('general.architecture')}.context_length", 0) or 0)

    def n_layer(self) -> int:
        """The model's block count (``{arch}.block_count``; 0 when absent)."""
        md = self.metadata()
        return int(md.get(f"{md.get('general.architecture')}.block_count", 0) or 0)

    def gqa(self) -> int | None:
        """Query heads per KV head (``head_count / head_count_kv``), Ollama's old num_gqa; None
        when the metadata does not say (or gives a per-layer list)."""
        md = self.metadata()
        arch = md.get("general.architecture")
        h, kv = md.get(f"{arch}.attention.head_count"), md.get(f"{arch}.attention.head_count_kv", None)
        kv = h if kv is None else kv
        if isinstance(h, int) and isinstance(kv, int) and kv > 0:
            return h // kv
        return None

    def has_pooling(self) -> bool:
        md = self.metadata()
        return int(md.get(f"{md.get('general.architecture')}.pooling_type", 0) or 0) > 0

    def adds_bos(self) -> bool:
        """Whether the tokenizer puts a BOS token first (``tokenizer.ggml.add_bos_token``)."""
        return self.metadata().get("tokenizer.ggml.add_bos_token") is True

    def chat_template(self) -> str:
        return str(self.metadata().get("tokenizer.chat_template", ""))


# GGUF value types (gguf-py's GGUFValueType; the GGUF spec, ggml/docs/gguf.md): scalar struct formats
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def read_gguf_metadata(path: Path, max_array: int = 64) -> dict[str, Any]:
    """The metadata key/values of a GGUF file (header only; tensors are not read).

    Arrays longer than ``max_array`` (the vocabulary, merges, scores) are left out.
    Layout from the GGUF spec (ggml/docs/gguf.md): magic, u32 version, u64 tensor count,
    u64 key count, then per key a string name, a u32 type and the value. This is a
    header walk rather than ``gguf.GGUFReader`` because that one maps every tensor and
    array (about 10 s for a 100 MB model on a busy 2-core machine; this takes
    milliseconds). Raises ValueError for a file that is not GGUF.
    """
    import struct

    def scalar(f, fmt):
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

    def string(f):
        return f.read(scalar(f, "<Q")).decode("utf-8", errors="replace")

    def value(f, t, keep=True):
        if t in _GGUF_SCALARS:
            return scalar(f, _GGUF_SCALARS[t])
        if t == _GGUF_STRING:
            return string(f)
        if t == _GGUF_ARRAY:
            et, n = scalar(f, "<I"), scalar(f, "<Q")
            if et in _GGUF_SCALARS and (not keep or n > max_array):
                f.seek(n * struct.calcsize(_GGUF_SCALARS[et]), 1)
                return None
            items = [value(f, et, keep and n <= max_array) for _ in range(n)]
            return items if keep and n <= max_array else None
        raise ValueError(f"unknown GGUF value type {t}")

    out: dict[str, Any] = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        scalar(f, "<I")
        scalar(f, "<Q")
        for _ in range(scalar(f, "<Q")):
            key = string(f)
            v = value(f, scalar(f, "<I"))
            if v is not None:
                out[key] = v
    return out


# llama.cpp's llama_ftype values (include/llama.h, enum llama_ftype), as Ollama prints them.
_FTYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
           12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
           19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
           26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
           36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}


def _ftype_name(code: Any) -> str:
    try:
        return _FTYPES.get(int(code), "unknown")
    except (TypeError, ValueError):
        return "unknown"
