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

Further: the flash-attention instance files expand (C preprocessor) to exactly the pair list
at head dims 64/128/256 with the right dequantizers; the embed step leaves a self-contained
text; and upstream's own get_rows / set_rows / cpy kernel templates, cut from the patched
quantize.metal of the tree `tqgguf build` prepared, compile through the shim with every
turbo instance line of that file and, run over an emulated grid, reproduce the C codec.

What this does not show: how Apple's GPU compiler evaluates the same text (docs/METAL.md).
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



# ----------------------------------------------------------------------------------------
# flash-attention instances and the embedded-library text


def _pairs() -> list[tuple[str, str]]:
    """GGML_CUDA_TURBO_FA_PAIRS of ggml-cuda/turbo-pairs.h, as (K, V) enum suffixes."""
    import re
    text = (ROOT / "native/ggml/src/ggml-cuda/turbo-pairs.h").read_text()
    return re.findall(r"X\(([A-Z0-9_]+), *([A-Z0-9_]+)\)", text)


def _preprocess(src: Path, *defines: str, tmp: Path) -> str:
    """The instance file through the C preprocessor, upstream's headers stubbed out (empty
    common.h, dequantize.h, fa_common.metal, fa_vec_common.metal)."""
    stub = tmp / "stub"
    stub.mkdir(exist_ok=True)
    for name in ("common.h", "dequantize.h", "fa_common.metal", "fa_vec_common.metal"):
        (stub / name).write_text("")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    r = subprocess.run([cxx, "-E", "-P", "-x", "c++", *defines, f"-I{stub}", f"-I{ROOT / 'native/ggml/src'}", str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("bf16", [False, True], ids=["no-bfloat", "bfloat"])
@pytest.mark.parametrize("kind", ["fa_turbo", "fa_vec_turbo"])
def test_fa_instances_are_the_pair_list_at_head_dims_64_128_256(tmp_path, require_engine, kind, bf16):
    """fa_turbo.metal / fa_vec_turbo.metal instantiate exactly the pairs of turbo-pairs.h
    (the list CUDA and supports_op use) at dk = dv = 64, 128, 256, bf16 pairs only with
    bfloat; each instance is named "<prefix>_<K>_<V>_dk<D>_dv<D>" with ggml's type names (what
    ggml_metal_turbo_fa_kv_name builds on the host) and gets the K and V dequantizers of its
    own types (vec: the _t4 forms with nl 16 for turbo; non-vec: the 4x4 forms, nl 4)."""
    import re
    from tqgguf.cachetypes import all_types
    names = set(all_types())

    def ggml_name(enum: str) -> str:
        low = enum.lower()
        name = low if low in names else low.removesuffix("_0")
        assert name in names, f"{enum}: no ggml type of that name"
        return name

    vec = kind == "fa_vec_turbo"
    text = _preprocess(METAL_DIR / f"{kind}.metal", *(["-DGGML_METAL_HAS_BF16"] if bf16 else []), tmp=tmp_path)
    got = {}
    for m in re.finditer(r'host_name\("([a-z0-9_]+)"\)\]\] kernel \w+ \w+<([^>]*)>;', text):
        got[m.group(1)] = [a.strip() for a in m.group(2).split(",")]
    prefix = "kernel_flash_attn_ext_vec" if vec else "kernel_flash_attn_ext"
    want = {}
    for k, v in _pairs():
        if not bf16 and "BF16" in (k, v):
            continue
        for d in (64, 128, 256):
            want[f"{prefix}_{ggml_name(k)}_{ggml_name(v)}_dk{d}_dv{d}"] = (k, v, d)
    assert set(got) == set(want) and len(want) in (27 * 3, 33 * 3)

    def args(enum: str) -> list[str]:
        n = ggml_name(enum)
        if n.startswith("turbo"):
            return [f"block_{n}_0", "NL_TURBO_4" if vec else "NL_TURBO", f"dequantize_{n}_0" + ("_t4" if vec else "")]
        dev = {"f16": "half", "bf16": "bfloat"}.get(n, f"block_{n}")
        if n in ("f16", "bf16"):
            dev += "4" if vec else "4x4"
        nl = {"f16": 1, "bf16": 1}.get(n, 8 if vec else 2)
        return [dev, str(nl), f"dequantize_{n}" + ("_t4" if vec else "")]

    for name, (k, v, d) in want.items():
        a = got[name]
        tail = args(k) + args(v) + [str(d), str(d)] + ([{64: "2", 128: "1", 256: "1"}[d]] if vec else [])
        assert a[-len(tail):] == tail, f"{name}: template arguments {a[-len(tail):]} != {tail}"


def test_embed_step_makes_our_metal_code_self_contained(tmp_path, shim, lib):
    """turbo-embed.cmake (the embedded-library step of patch 0010) replaces every include of
    ours by the file's text, so the library compiled at run time needs no include path: the
    flattened text of the codec compiles through the shim with no -I at all and writes the
    same bytes as the headers did."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake (needed to build the engine) is not on PATH")
    src = tmp_path / "in.metal"
    src.write_text('#include "ggml-turbo-common.h"\n'
                   '#include "turbo-dequantize.h" // as dequantize.h includes it\n'
                   '#include "turbo-quantize.h"\n#include "turbo-fa.h"\n')
    out = tmp_path / "flat.h"
    metal = ROOT / "native/ggml/src/ggml-metal"
    r = subprocess.run([cmake, f"-DSRC={src}", f"-DDST={out}",
                        f"-DDIRS={metal / 'kernels'}|{metal}|{ROOT / 'native/ggml/src'}", "-P", str(metal / "turbo-embed.cmake")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    flat = out.read_text()
    for name in ("turbo-dequantize.h", "turbo-quantize.h", "turbo-fa.h", "ggml-turbo-common.h", "ggml-turbo-tables.h",
                 "ggml-cuda/turbo-pairs.h"):
        assert f'#include "{name}"' not in flat
    assert flat.count("#define GGML_TURBO4_CENTROIDS") == 1 and flat.count("#define GGML_CUDA_TURBO_FA_PAIRS(X)") == 1
    assert "#pragma once" not in flat
    # the driver with its four includes replaced by the shim and the flattened text
    driver = (SHIM_DIR / "turbo_shim_driver.cpp").read_text()
    for name in ("metal_shim.h", "ggml-turbo-common.h", "turbo-dequantize.h", "turbo-quantize.h"):
        assert f'#include "{name}"\n' in driver
        driver = driver.replace(f'#include "{name}"\n', "")
    (tmp_path / "flat_driver.cpp").write_text(f'#include "{SHIM_DIR / "metal_shim.h"}"\n#include "{out}"\n' + driver)
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    so = tmp_path / "flat.so"
    r = subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-Wno-unknown-pragmas", "-shared", "-fPIC",
                        str(tmp_path / "flat_driver.cpp"), "-o", str(so)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    flat_lib = ctypes.CDLL(str(so))
    x = np.random.default_rng(11).standard_normal((3000, QK_TURBO)).astype(np.float32)
    for n in (4, 3, 2):
        f = getattr(flat_lib, f"tq_metal_quantize_turbo{n}")
        f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
        got = np.zeros((len(x), REF[f"turbo{n}"].type_size), dtype=np.uint8)
        f(_ptr(x), _ptr(got), len(x))
        assert np.array_equal(got, metal_quantize(shim, f"turbo{n}", x))


# ----------------------------------------------------------------------------------------
# upstream's kernels with our instances, run through the shim


KERNEL_TEMPLATES = ("kernel_cpy_f32_q", "kernel_cpy_q_f32", "kernel_get_rows_q", "kernel_set_rows_q")

# what each template's instances are called with: the kernel arguments after the kargs and
# buffers, as (grid position, thread position, threads per group), and the grid loop
_RUNNERS = {
    "kernel_set_rows_q": ("ggml_metal_kargs_set_rows", "const void * src0, const void * src1, void * dst",
                          "src0, src1, (float *) dst", "uint3{gx, gy, gz}, (uint) t, uint3{(uint) nth, 1, 1}"),
    "kernel_get_rows_q": ("ggml_metal_kargs_get_rows", "const void * src0, const void * src1, void * dst",
                          "src0, src1, dst", "uint3{gx, gy, gz}, (ushort) t, ushort3{(ushort) nth, 1, 1}"),
    "kernel_cpy_f32_q": ("ggml_metal_kargs_cpy", "const void * src0, const void * src1, void * dst",
                         "(const char *) src0, (char *) dst", "uint3{gx, gy, gz}, ushort3{(ushort) t, 0, 0}, ushort3{(ushort) nth, 1, 1}"),
    "kernel_cpy_q_f32": ("ggml_metal_kargs_cpy", "const void * src0, const void * src1, void * dst",
                         "(const char *) src0, (char *) dst", "uint3{gx, gy, gz}, ushort3{(ushort) t, 0, 0}, ushort3{(ushort) nth, 1, 1}"),
}


def patched_metal_dir() -> Path:
    """ggml-metal of the patched tree that `tqgguf build` prepared (the series, patch 0010
    included, plus native/)."""
    from tqgguf.builder.source import source_tree
    d = source_tree() / "vendor" / "llama.cpp" / "ggml" / "src" / "ggml-metal"
    if not (d / "kernels" / "quantize.metal").exists():
        pytest.fail(f"{d} is missing: run `tqgguf build` (it prepares the patched tree)")
    return d


@pytest.fixture(scope="module")
def kernels(tmp_path_factory, require_engine) -> tuple[ctypes.CDLL, dict[str, str]]:
    """The four kernel templates, cut verbatim from the patched kernels/quantize.metal, with
    every turbo instance line of that file turned into an exported runner that calls the
    instance once per thread of a grid (gx, gy, gz) x nth threads."""
    import re
    metal = patched_metal_dir()
    src = (metal / "kernels" / "quantize.metal").read_text()
    parts = ['#include "metal_shim.h"', '#include "ggml-metal-impl.h"', '#include "ggml-turbo-common.h"',
             '#include "turbo-dequantize.h"', '#include "turbo-quantize.h"']
    for name in KERNEL_TEMPLATES:
        i = src.index(f"kernel void {name}(")
        parts.append(src[src.rindex("template", 0, i):src.index("\n}\n", i) + 3])
    instances = {}
    for m in re.finditer(r'template \[\[host_name\("(\w+)"\)\]\]\s+kernel \w+ (\w+)<([^>]*)>;', src):
        host, tmpl, args = m.groups()
        if "turbo" not in host:
            continue
        kargs, params, call, pos = _RUNNERS[tmpl]
        parts.append(f"extern \"C\" void run_{host}(const {kargs} * a, {params}, int ngx, int ngy, int ngz, int nth) {{\n"
                     f"    {kargs} args = *a;\n"
                     f"    for (uint gz = 0; gz < (uint) ngz; ++gz) for (uint gy = 0; gy < (uint) ngy; ++gy)\n"
                     f"    for (uint gx = 0; gx < (uint) ngx; ++gx) for (int t = 0; t < nth; ++t)\n"
                     f"        {tmpl}<{args}>(args, {call}, {pos});\n}}")
        instances[host] = tmpl
    if not instances:
        pytest.fail(f"{metal / 'kernels/quantize.metal'} has no turbo instances: the prepared tree predates "
                    "patch 0010; run `tqgguf build`")
    d = tmp_path_factory.mktemp("kernels")
    (d / "quantize_kernels.cpp").write_text("\n\n".join(parts) + "\n")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    so = d / "kernels.so"
    r = subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Werror", "-Wno-attributes",
                        "-Wno-unknown-pragmas", "-Wno-unused-variable", "-shared", "-fPIC", f"-I{SHIM_DIR}", f"-I{metal}",
                        f"-I{metal / 'kernels'}", f"-I{metal.parent}", str(d / "quantize_kernels.cpp"), "-o", str(so)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"upstream's kernels with our instances do not compile through the shim:\n{r.stderr[-4000:]}"
    return ctypes.CDLL(str(so)), instances


def test_every_turbo_instance_of_quantize_metal_is_run_here(kernels):
    _, instances = kernels
    want = {f"kernel_set_rows_f32_{i}_turbo{n}" for i in ("i64", "i32") for n in (4, 3, 2)} | \
           {f"kernel_get_rows_turbo{n}" for n in (4, 3, 2)} | {f"kernel_cpy_f32_turbo{n}" for n in (4, 3, 2)} | \
           {f"kernel_cpy_turbo{n}_{t}" for n in (4, 3, 2) for t in ("f32", "f16")}
    assert set(instances) == want


class _KSetRows(ctypes.Structure):
    _fields_ = [("nk0", ctypes.c_int32), ("ne01", ctypes.c_int32), ("nb01", ctypes.c_uint64), ("nb02", ctypes.c_uint64),
                ("nb03", ctypes.c_uint64), ("ne11", ctypes.c_int32), ("ne12", ctypes.c_int32), ("nb10", ctypes.c_uint64),
                ("nb11", ctypes.c_uint64), ("nb12", ctypes.c_uint64), ("nb1", ctypes.c_uint64), ("nb2", ctypes.c_uint64),
                ("nb3", ctypes.c_uint64)]


class _KGetRows(ctypes.Structure):
    _fields_ = [("ne00t", ctypes.c_int32), ("ne00", ctypes.c_int32), ("nb01", ctypes.c_uint64), ("nb02", ctypes.c_uint64),
                ("nb03", ctypes.c_uint64), ("ne10", ctypes.c_int32), ("nb10", ctypes.c_uint64), ("nb11", ctypes.c_uint64),
                ("nb12", ctypes.c_uint64), ("nb1", ctypes.c_uint64), ("nb2", ctypes.c_uint64), ("nb3", ctypes.c_uint64)]


class _KCpy(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64 if n.startswith("n") and n[1] in "ke" else ctypes.c_uint64)
                for n in ("nk0", "ne00", "ne01", "ne02", "ne03", "nb00", "nb01", "nb02", "nb03",
                          "ne0", "ne1", "ne2", "ne3", "nb0", "nb1", "nb2", "nb3")]


def _run(lib, host, kargs, src0, src1, dst, grid, nth):
    f = getattr(lib, f"run_{host}")
    f.restype = None
    f(ctypes.byref(kargs), _ptr(src0), _ptr(src1), _ptr(dst), *grid, nth)


@pytest.mark.parametrize("name", NAMES)
def test_set_rows_kernel_writes_the_cpu_bytes_to_the_indexed_rows(kernels, lib, name):
    """kernel_set_rows_f32_{i64,i32}_turboN (the Metal cache write), upstream's template run over
    a grid as ggml-metal-ops.cpp sets it up (nk0 = blocks per row): 300 rows of 256 values into a
    600-row cache at shuffled rows; the cache rows equal the CPU encoder's bytes, others untouched."""
    klib, _ = kernels
    rng = np.random.default_rng(21)
    n_rows, ne0, n_cache = 300, 256, 600
    x = (rng.standard_normal((n_rows, ne0)) * np.exp(rng.normal(0, 2, (n_rows, 1)))).astype(np.float32)
    row_bytes = ne0 // QK_TURBO * REF[name].type_size
    want_rows = c_quantize(lib, name, x, "search").reshape(n_rows, row_bytes)
    for idx_t in (np.int64, np.int32):
        idx = rng.permutation(n_cache)[:n_rows].astype(idx_t)
        dst = np.full((n_cache, row_bytes), 0xA5, dtype=np.uint8)
        k = _KSetRows(nk0=ne0 // QK_TURBO, ne01=n_rows, nb01=4 * ne0, nb02=4 * ne0 * n_rows, nb03=4 * ne0 * n_rows,
                      ne11=1, ne12=1, nb10=idx.itemsize, nb11=idx.nbytes, nb12=idx.nbytes,
                      nb1=row_bytes, nb2=row_bytes * n_cache, nb3=row_bytes * n_cache)
        _run(klib, f"kernel_set_rows_f32_{'i64' if idx_t is np.int64 else 'i32'}_{name}", k, x, idx, dst, (n_rows, 1, 1), 2)
        assert np.array_equal(dst[idx], want_rows), f"{name} {idx_t.__name__}: rows differ from the CPU encoder"
        untouched = np.setdiff1d(np.arange(n_cache), idx)
        assert np.all(dst[untouched] == 0xA5)


@pytest.mark.parametrize("name", NAMES)
def test_get_rows_and_cpy_kernels_decode_to_the_cpu_floats(kernels, lib, name):
    """kernel_get_rows_turboN (rows picked by index), kernel_cpy_turboN_{f32,f16} and
    kernel_cpy_f32_turboN (K-shift, casts): upstream's templates with our instances reproduce
    the C codec (floats bit for bit; f16: the C floats rounded to nearest even; bytes)."""
    klib, _ = kernels
    rng = np.random.default_rng(22)
    n_rows, ne0 = 200, 512
    x = rng.standard_normal((n_rows, ne0)).astype(np.float32)
    row_bytes = ne0 // QK_TURBO * REF[name].type_size
    q = c_quantize(lib, name, x, "search").reshape(n_rows, row_bytes)
    deq = c_dequantize(lib, name, q).reshape(n_rows, ne0)

    idx = rng.integers(0, n_rows, size=77).astype(np.int32)
    out = np.zeros((len(idx), ne0), dtype=np.float32)
    k = _KGetRows(ne00t=ne0 // 16, ne00=ne0, nb01=row_bytes, nb02=row_bytes * n_rows, nb03=row_bytes * n_rows,
                  ne10=len(idx), nb10=4, nb11=idx.nbytes, nb12=idx.nbytes, nb1=4 * ne0, nb2=out.nbytes, nb3=out.nbytes)
    _run(klib, f"kernel_get_rows_{name}", k, q, idx, out, (len(idx), 1, 1), ne0 // 16)
    assert np.array_equal(out.view(np.uint32), deq[idx].view(np.uint32))

    def cpy(host, src, dst, nk0, nb00, nb01, nb1):
        k = _KCpy(nk0=nk0, ne00=ne0, ne01=n_rows, ne02=1, ne03=1, nb00=nb00, nb01=nb01, nb02=nb01 * n_rows,
                  nb03=nb01 * n_rows, ne0=ne0, ne1=n_rows, ne2=1, ne3=1, nb0=nb00 if "f32_turbo" not in host else 0,
                  nb1=nb1, nb2=nb1 * n_rows, nb3=nb1 * n_rows)
        _run(klib, host, k, src, src, dst, (n_rows, 1, 1), nk0)
        return dst

    f32 = cpy(f"kernel_cpy_{name}_f32", q, np.zeros((n_rows, ne0), np.float32), ne0 // 16, 0, row_bytes, 4 * ne0)
    assert np.array_equal(f32.view(np.uint32), deq.view(np.uint32))
    f16 = cpy(f"kernel_cpy_{name}_f16", q, np.zeros((n_rows, ne0), np.float16), ne0 // 16, 0, row_bytes, 2 * ne0)
    assert np.array_equal(f16.view(np.uint16), deq.astype(np.float16).view(np.uint16))
    back = cpy(f"kernel_cpy_f32_{name}", x, np.zeros((n_rows, row_bytes), np.uint8), ne0 // QK_TURBO, 4, 4 * ne0, row_bytes)
    assert np.array_equal(back, q)


def test_supports_op_accepts_exactly_the_instantiated_fa_kernels(tmp_path, require_engine):
    """The host side (ggml-metal-turbo.h, compiled here as C against the patched ggml.h):
    ggml_metal_turbo_fa_supported says yes for a K/V pair with a turbo side exactly when
    fa_turbo.metal and fa_vec_turbo.metal define a kernel for it, over every ggml type as K
    and V, head dims 32..256 (also Q's differing) and with/without bfloat, and
    ggml_metal_turbo_fa_kv_name builds the name those kernels have."""
    from tqgguf.cachetypes import all_types, engine_library
    metal = patched_metal_dir()
    (tmp_path / "host.c").write_text(
        '#include "ggml.h"\n#include "ggml-metal-turbo.h"\n#include <string.h>\n'
        "int tq_supported(int tk, int tv, int dq, int d, int has_bf) {\n"
        "    struct ggml_tensor q, k, v, op;\n"
        "    memset(&q, 0, sizeof q); memset(&k, 0, sizeof k); memset(&v, 0, sizeof v); memset(&op, 0, sizeof op);\n"
        "    q.ne[0] = dq; k.type = (enum ggml_type) tk; k.ne[0] = d; v.type = (enum ggml_type) tv; v.ne[0] = d;\n"
        "    op.src[0] = &q; op.src[1] = &k; op.src[2] = &v;\n"
        "    return ggml_metal_turbo_fa_supported(&op, has_bf != 0);\n}\n"
        "const char * tq_name(int tk, int tv, char * buf, int n) {\n"
        "    struct ggml_tensor k, v, op;\n"
        "    memset(&k, 0, sizeof k); memset(&v, 0, sizeof v); memset(&op, 0, sizeof op);\n"
        "    k.type = (enum ggml_type) tk; v.type = (enum ggml_type) tv; op.src[1] = &k; op.src[2] = &v;\n"
        "    return ggml_metal_turbo_fa_kv_name(&op, buf, (size_t) n);\n}\n")
    cc = shutil.which("cc") or shutil.which("gcc")
    so = tmp_path / "host.so"
    # ggml_type_name comes from the engine's libggml-base, linked in by path (tqgguf loads the engine's
    # libraries RTLD_LOCAL: their symbols are not there for a later dlopen to bind to)
    base = engine_library("ggml-base")
    r = subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{metal}",
                        f"-I{metal.parents[1] / 'include'}", str(tmp_path / "host.c"), str(base),
                        f"-Wl,-rpath,{base.parent}", "-o", str(so)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    host = ctypes.CDLL(str(so))
    host.tq_name.restype = ctypes.c_char_p
    types = {name: ti.id for name, ti in all_types().items()}
    turbo = {n for n in types if n.startswith("turbo")}
    import re
    defined = {}
    for bf16 in (False, True):
        text = "".join(_preprocess(METAL_DIR / f"{k}.metal", *(["-DGGML_METAL_HAS_BF16"] if bf16 else []), tmp=tmp_path)
                       for k in ("fa_turbo", "fa_vec_turbo"))
        defined[bf16] = set(re.findall(r'host_name\("(\w+)"\)', text))
    buf = ctypes.create_string_buffer(64)
    n_yes = 0
    for kn, kid in types.items():
        for vn, vid in types.items():
            if kn not in turbo and vn not in turbo:
                continue
            tag = host.tq_name(kid, vid, buf, 64).decode()
            assert tag == f"{kn}_{vn}"
            for d in (32, 64, 80, 96, 128, 256, 512):
                for bf16 in (False, True):
                    have = {f"kernel_flash_attn_ext_{tag}_dk{d}_dv{d}", f"kernel_flash_attn_ext_vec_{tag}_dk{d}_dv{d}"}
                    exists = have <= defined[bf16]
                    assert not (have & defined[bf16]) or exists, f"{tag} dk{d}: only one of the two kernels exists"
                    said = bool(host.tq_supported(kid, vid, d, d, int(bf16)))
                    assert said == exists, f"{kn}/{vn} dk{d} bfloat={bf16}: supports_op says {said}, kernels exist: {exists}"
                    n_yes += said
                    if said:
                        assert not host.tq_supported(kid, vid, d + 32, d, int(bf16)), "Q head dim must match"
    assert n_yes == 3 * (27 + 33)
