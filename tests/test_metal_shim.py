"""Our Metal turbo code, compiled as C++ through tests/metal/metal_shim.h, against the C codec.

No Apple GPU or Metal compiler exists here, so the Metal source text itself
(native/ggml/src/ggml-metal/kernels/turbo-dequantize.h and turbo-quantize.h, included unchanged)
is compiled by the host C++ compiler with a shim that maps MSL's address spaces, ``half``,
vector and matrix types and the ``precise::`` builtins onto C++. The result is compared bit for
bit with ggml-turbo.c in the built libggml-base:

- the encoder (what SET_ROWS / CPY f32->turbo run, one block per thread) against
  ``quantize_row_turboN_0`` on >= 100,000 random blocks plus the CPU tests' edge blocks;
- every dequantize form the kernels call (type4x4 and type4, float and half) against
  ``dequantize_row_turboN_0``: float forms bit for bit, half forms bit for bit against the C
  floats rounded to fp16 (round to nearest even), walked in the kernels' chunk order
  (chunk i -> block i/nl, il = i%nl) over the encoded blocks and 100,000 blocks of random
  bytes with random finite fp16 scales (every index value in every position).

What this does not show: how Apple's GPU compiler evaluates the same text (README, "Metal").
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.test_native_codec import EDGE, EDGE_LABELS, NAMES, REF, c_dequantize, c_quantize, _ptr
from tests.test_native_codec import blocks as blocks  # noqa: F401  (the module's >=100k-block fixture)
from tqgguf.reference.codebook import QK_TURBO

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[1]
SHIM_DIR = ROOT / "tests" / "metal"
METAL_DIR = ROOT / "native" / "ggml" / "src" / "ggml-metal" / "kernels"
N_RANDOM_BYTES = 100_000
# form -> (entry point of turbo_shim_driver.cpp, output dtype)
FORMS = {
    "type4x4 float": ("tq_metal_dequantize_turbo{n}_f32", np.float32),
    "type4x4 half": ("tq_metal_dequantize_turbo{n}_f16", np.float16),
    "type4 float": ("tq_metal_dequantize_t4_turbo{n}_f32", np.float32),
    "type4 half": ("tq_metal_dequantize_t4_turbo{n}_f16", np.float16),
}


def compile_shim(out: Path) -> Path:
    """Compile tests/metal/turbo_shim_driver.cpp (the Metal headers through the shim) into a
    shared library at ``out``. IEEE evaluation: no fast math, no FMA contraction."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.fail("no C++ compiler (CXX, c++, g++, clang++) to compile the Metal shim")
    cmd = [cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra", "-Werror",
           "-Wno-unknown-pragmas", "-shared", "-fPIC", f"-I{SHIM_DIR}", f"-I{ROOT / 'native/ggml/src'}",
           f"-I{METAL_DIR}", str(SHIM_DIR / "turbo_shim_driver.cpp"), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"the Metal turbo code does not compile through the shim:\n{' '.join(cmd)}\n{r.stderr}"
    return out


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(compile_shim(tmp_path_factory.mktemp("metal") / "turbo_shim.so")))
    for n in (4, 3, 2):
        for stem in [f"tq_metal_quantize_turbo{n}"] + [s.format(n=n) for s, _ in FORMS.values()]:
            f = getattr(lib, stem)
            f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    return lib


@pytest.fixture(scope="module")
def lib(require_engine) -> ctypes.CDLL:
    from tests.test_native_codec import _bind
    return _bind(require_engine)


def metal_quantize(shim, name: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, QK_TURBO)
    out = np.zeros((len(x), REF[name].type_size), dtype=np.uint8)
    getattr(shim, f"tq_metal_quantize_turbo{name[-1]}")(_ptr(x), _ptr(out), len(x))
    return out


def metal_dequantize(shim, name: str, form: str, raw: np.ndarray) -> np.ndarray:
    stem, dtype = FORMS[form]
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, REF[name].type_size)
    out = np.zeros((len(raw), QK_TURBO), dtype=dtype)
    getattr(shim, stem.format(n=name[-1]))(_ptr(raw), _ptr(out), len(raw))
    return out


def random_byte_blocks(name: str, n: int) -> np.ndarray:
    """n blocks of random index bytes, each with a random finite fp16 scale (normal and
    subnormal, both signs)."""
    rng = np.random.default_rng(7 + int(name[-1]))
    raw = rng.integers(0, 256, size=(n, REF[name].type_size), dtype=np.uint8)
    d = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    d[(d & 0x7C00) == 0x7C00] &= 0xBBFF  # exponent all ones (inf/NaN) -> a finite scale
    raw[:, :2] = d.view(np.uint8).reshape(n, 2)
    return raw


def _first_mismatches(got: np.ndarray, want: np.ndarray, n_edge: int = 0) -> str:
    g = got.view(np.uint16 if got.dtype == np.float16 else (np.uint8 if got.dtype == np.uint8 else np.uint32))
    w = want.view(g.dtype)
    bad = np.nonzero((g != w).any(axis=1))[0]
    lines = [f"{len(bad)} of {len(got)} blocks differ"]
    for i in bad[:3]:
        label = EDGE_LABELS[i - (len(got) - n_edge)] if n_edge and i >= len(got) - n_edge else "random"
        j = int(np.nonzero(g[i] != w[i])[0][0])
        lines.append(f"  block {i} ({label}), first differing position {j}: Metal {g[i][j]!r} vs C {w[i][j]!r}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", NAMES)
def test_metal_encoder_writes_the_cpu_bytes(shim, lib, blocks, name):  # noqa: F811
    """quantize_turboN_0 (Metal SET_ROWS / CPY f32->turbo) == quantize_row_turboN_0 (CPU KV
    cache write) byte for byte on >= 100k random blocks and every edge block."""
    assert len(blocks) - len(EDGE) >= 100_000 and np.array_equal(blocks[-len(EDGE):], EDGE)
    got = metal_quantize(shim, name, blocks)
    want = c_quantize(lib, name, blocks, "search")
    assert np.array_equal(got, want), "Metal encoder vs C: " + _first_mismatches(got, want, len(EDGE))


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("name", NAMES)
def test_metal_dequantize_form_matches_c(shim, lib, blocks, name, form):  # noqa: F811
    """Every Metal dequantize form reproduces dequantize_row_turboN_0 bit for bit (half forms:
    the C floats rounded to nearest-even fp16) on the encoded blocks (>= 100k random + edge)
    and 100k blocks of random bytes."""
    raw = np.concatenate([c_quantize(lib, name, blocks, "search"), random_byte_blocks(name, N_RANDOM_BYTES)])
    want = c_dequantize(lib, name, raw)
    got = metal_dequantize(shim, name, form, raw)
    if got.dtype == np.float16:
        want = want.astype(np.float16)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{name} {form}: " + _first_mismatches(got, want)

