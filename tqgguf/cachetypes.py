"""The KV-cache type registry: the one place that knows which cache types exist.

Names are ggml type names (what llama.cpp's ``-ctk/-ctv`` accept). Numeric ids are never
hard-coded: they are looked up by name in the built libggml-base (``ggml_type_name`` over
``ggml_type_count()``, which our native code exports), so Python cannot drift from C.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

#: Cache types accepted by ``-ctk/-ctv`` (upstream common/arg.cpp list + ours), in the
#: order help texts show them.
KV_CACHE_TYPES: tuple[str, ...] = (
    "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1",
    "turbo4", "turbo3", "turbo2",
)
TURBO_TYPES: tuple[str, ...] = ("turbo4", "turbo3", "turbo2")
UNQUANTIZED: tuple[str, ...] = ("f32", "f16", "bf16")


class CacheTypeError(ValueError):
    """An unknown KV-cache type name; the message lists the valid names."""


class EngineNotBuiltError(RuntimeError):
    """The installed llama_cpp is missing or is not the tqgguf-patched build."""


def check_cache_type(name: str, what: str = "cache type") -> str:
    """Normalise and validate a cache type name (case-insensitive).

    Returns the canonical lower-case name. Raises CacheTypeError listing the valid names.
    """
    canon = str(name).strip().lower()
    if canon not in KV_CACHE_TYPES:
        raise CacheTypeError(f"unknown {what} {name!r}; valid: {', '.join(KV_CACHE_TYPES)}")
    return canon


def is_quantized(name: str) -> bool:
    """True for every cache type that llama.cpp treats as quantized (rotation applies)."""
    return check_cache_type(name) not in UNQUANTIZED


#: ``-fa`` / ``--flash-attn`` values, as llama.cpp's.
FLASH_ATTN_MODES: tuple[str, ...] = ("on", "off", "auto")

# LLAMA_MAX_SEQ of the patched engine (patches/0011-max-seq-1024.patch; upstream's is 256): the most
# sequences one llama.cpp context holds -- llama-server -np slots, -npl of a batched bench. The
# engine reports it as llama_max_parallel_sequences() (tests/test_max_seq.py checks they agree).
MAX_SEQUENCES = 1024
#: The one statement of the flash-attention rule (``flash_attn_conflict`` applies it).
FLASH_ATTN_RULE = ("llama.cpp needs flash attention for a quantized V cache: use -fa on|auto "
                   "or a V cache type of " + ", ".join(UNQUANTIZED))


def flash_attn_conflict(mode: str, ctv: str) -> bool:
    """True when flash attention ``mode`` ("on", "off", "auto") cannot serve V cache type
    ``ctv``: ``off`` with a quantized V (llama.cpp stores V transposed without flash
    attention, which a block-quantized type cannot be). Raises CacheTypeError for an
    unknown type."""
    return str(mode).strip().lower() == "off" and is_quantized(ctv)


@dataclass(frozen=True)
class TypeInfo:
    """Facts about one ggml type, read from the built library.

    id: ggml enum value; block_size: values per block; type_size: bytes per block;
    bits_per_value: 8 * type_size / block_size.
    """

    name: str
    id: int
    block_size: int
    type_size: int

    @property
    def bits_per_value(self) -> float:
        return 8.0 * self.type_size / self.block_size

    def row_bytes(self, n_values: int) -> int:
        """Bytes of a row of ``n_values`` values (ggml_row_size: type_size * n / block_size,
        ggml/src/ggml.c). Raises ValueError when n_values is not a multiple of block_size."""
        if n_values % self.block_size:
            raise ValueError(f"{n_values} values are not a whole number of {self.name} blocks of {self.block_size}")
        return self.type_size * n_values // self.block_size


def _lib_dir() -> Path:
    from importlib.util import find_spec

    spec = find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise EngineNotBuiltError("llama_cpp is not installed; run `tqgguf build`")
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def engine_library(stem: str) -> Path | None:
    """The file of the installed engine's library ``stem`` (``ggml``, ``ggml-base``) that
    libllama itself loads. A wheel cannot hold symbolic links, so ``libggml.so``,
    ``libggml.so.0`` and ``libggml.so.0.25.3`` are three copies of one library; loading
    another copy than libllama's (its DT_NEEDED soname, ``lib<stem>.so.<major>``; on macOS
    ``lib<stem>.<major>.dylib``) would give a second ggml with its own backend registry and
    abort callback. None when there is no such file."""
    import re

    files = sorted(_lib_dir().glob(f"lib{stem}.*")) + sorted(_lib_dir().glob(f"{stem}.dll"))
    rank = [rf"lib{re.escape(stem)}\.so\.\d+", rf"lib{re.escape(stem)}\.\d+\.dylib", rf"lib{re.escape(stem)}\.(so|dylib)",
            rf"{re.escape(stem)}\.dll"]
    for pattern in rank:
        for f in files:
            if re.fullmatch(pattern, f.name):
                return f
    return files[0] if files else None


@functools.lru_cache(maxsize=1)
def libggml_base() -> ctypes.CDLL:
    """ctypes handle of the installed libggml-base (raises EngineNotBuiltError)."""
    lib_dir = _lib_dir()
    path = engine_library("ggml-base")
    if path is None:
        raise EngineNotBuiltError(f"no libggml-base in {lib_dir}; run `tqgguf build`")
    # RTLD_LOCAL (ctypes' default on Linux), as llama_cpp loads libllama: RTLD_GLOBAL would promote
    # the engine's libraries to the process's global scope, and where they carry a static
    # libstdc++ (the GPU image's compiler has no shared one) every extension module imported later
    # (matplotlib's ft2font, numpy's) bound part of its C++ runtime to that copy (issue 26 item 5,
    # docs/CUDA.md "load order")
    lib = ctypes.CDLL(str(path))
    if not hasattr(lib, "ggml_type_count"):
        raise EngineNotBuiltError(
            f"{path} is a stock llama.cpp build without the turbo types; run `tqgguf build`")
    lib.ggml_type_count.restype = ctypes.c_int
    lib.ggml_type_name.restype = ctypes.c_char_p
    lib.ggml_type_name.argtypes = [ctypes.c_int]
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_blck_size.argtypes = [ctypes.c_int]
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_type_size.argtypes = [ctypes.c_int]
    return lib


@functools.lru_cache(maxsize=1)
def all_types() -> dict[str, TypeInfo]:
    """Every ggml type of the built library by name (removed slots skipped)."""
    lib = libggml_base()
    out: dict[str, TypeInfo] = {}
    for i in range(lib.ggml_type_count()):
        bs = lib.ggml_blck_size(i)
        if bs <= 0:
            continue
        name = lib.ggml_type_name(i).decode()
        out[name] = TypeInfo(name, i, bs, lib.ggml_type_size(i))
    return out


def type_info(name: str) -> TypeInfo:
    """TypeInfo of a KV-cache type name (CacheTypeError if unknown, EngineNotBuiltError
    if the installed engine lacks it)."""
    canon = check_cache_type(name)
    types = all_types()
    if canon not in types:
        raise EngineNotBuiltError(f"the installed engine has no ggml type {canon!r}; run `tqgguf build`")
    return types[canon]


def ggml_type_id(name: str) -> int:
    """ggml enum value of a cache type name, looked up in the built library."""
    return type_info(name).id
