"""The C codec in the built libggml-base (ggml-turbo.c) against the numpy reference.

Needs the engine (``tqgguf build``): skipped without it, failed without it when
TQGGUF_REQUIRE_ENGINE=1 (see conftest.py).

Contract checked here: the C encoders write exactly the reference's bytes (both encoders, all
three types, >= 100k random blocks of several distributions plus edge blocks), the C decoder
reproduces the reference's floats bit for bit, vec_dot equals dequantize . y, the many-row
vec_dot (flash attention's grouped decode) equals one vec_dot per row bit for bit, every SIMD
level (AVX2, AVX-512) agrees with the portable code byte for byte, and the C round-trip MSE
matches the Lloyd-Max theory.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tqgguf import cachetypes
from tqgguf.reference import codec
from tqgguf.reference.codebook import LEVELS, QK_TURBO, boundaries_f32, expected_relative_mse

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("turbo4", "turbo3", "turbo2")
ENCODERS = ("norm", "search")
REF = {name: codec.TYPES[f"{name}_0"] for name in NAMES}
FP16_MAX_BITS = 0x7BFF
N_RANDOM = 100_000

# ----------------------------------------------------------------------------------------
# ctypes bindings


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    for n in (4, 3, 2):
        for fn in (f"quantize_row_turbo{n}_0_ref", f"quantize_row_turbo{n}_0"):
            getattr(lib, fn).argtypes = [vp, vp, i64]
            getattr(lib, fn).restype = None
        f = getattr(lib, f"dequantize_row_turbo{n}_0")
        f.argtypes, f.restype = [vp, vp, i64], None
        f = getattr(lib, f"ggml_vec_dot_turbo{n}_0_f32")
        f.argtypes = [ctypes.c_int, vp, ctypes.c_size_t, vp, ctypes.c_size_t, vp, ctypes.c_size_t, ctypes.c_int]
        f.restype = None
    lib.ggml_turbo_vec_dot_multi.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, vp, vp, vp, i64]
    lib.ggml_turbo_vec_dot_multi.restype = None
    lib.ggml_turbo_simd_level.restype = ctypes.c_int
    lib.ggml_turbo_simd_level.argtypes = []
    lib.ggml_type_count.argtypes = []
    return lib


@pytest.fixture(scope="module")
def lib(require_engine) -> ctypes.CDLL:
    return _bind(require_engine)


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    assert a.flags.c_contiguous
    return ctypes.c_void_p(a.ctypes.data)


def c_quantize(lib, name: str, x: np.ndarray, encode: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, QK_TURBO)
    out = np.zeros((len(x), REF[name].type_size), dtype=np.uint8)
    n = name[-1]
    fn = getattr(lib, f"quantize_row_turbo{n}_0_ref" if encode == "norm" else f"quantize_row_turbo{n}_0")
    fn(_ptr(x), _ptr(out), x.size)
    return out


def c_dequantize(lib, name: str, raw: np.ndarray) -> np.ndarray:
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, REF[name].type_size)
    out = np.empty((len(raw), QK_TURBO), dtype=np.float32)
    getattr(lib, f"dequantize_row_turbo{name[-1]}_0")(_ptr(raw), _ptr(out), out.size)
    return out


def c_vec_dot(lib, name: str, raw_row: np.ndarray, y: np.ndarray) -> float:
    s = np.zeros(1, dtype=np.float32)
    getattr(lib, f"ggml_vec_dot_turbo{name[-1]}_0_f32")(y.size, _ptr(s), 0, _ptr(raw_row), 0, _ptr(y), 0, 1)
    return float(s[0])


def multi_dot_mismatches(lib, name: str, rnd: np.ndarray, rng: np.random.Generator) -> int:
    """ggml_turbo_vec_dot_multi against one ggml_vec_dot_turboN_0_f32 call per row of y: the
    number of results whose bits differ, over rows of 1, 2 and 4 blocks (head dims 64 ... 256)
    and 1, 3, 7, 16 and 17 rows of y (17: two passes of the 16-row accumulators)."""
    from tqgguf.cachetypes import ggml_type_id

    tid = ggml_type_id(name)
    bad = 0
    for n_blocks in (1, 2, 4):
        for nq in (1, 3, 7, 16, 17):
            for r0 in range(0, 64 * n_blocks, 8 * n_blocks):
                row = np.ascontiguousarray(rnd[r0:r0 + n_blocks].reshape(-1))
                y = (rng.standard_normal((nq, 64 * n_blocks)) * np.exp(rng.normal(0, 2, (nq, 1)))).astype(np.float32)
                s = np.zeros(nq, dtype=np.float32)
                lib.ggml_turbo_vec_dot_multi(tid, 64 * n_blocks, nq, _ptr(s), _ptr(row), _ptr(y), 64 * n_blocks)
                one = np.array([c_vec_dot(lib, name, row, np.ascontiguousarray(y[h])) for h in range(nq)], dtype=np.float32)
                bad += int(np.count_nonzero(s.view(np.uint32) != one.view(np.uint32)))
    return bad


# ----------------------------------------------------------------------------------------
# data


def edge_blocks() -> np.ndarray:
    """Hand-picked blocks (labels in EDGE_LABELS)."""
    rng = np.random.default_rng(99)
    g = rng.standard_normal(QK_TURBO).astype(np.float32)
    z = np.zeros(QK_TURBO, dtype=np.float32)
    out: list[tuple[str, np.ndarray]] = [("zeros", z), ("negative zeros", -z)]

    def one(j, v, base=z):
        b = base.copy()
        b[j] = v
        return b

    out += [("one outlier 1e4 in zeros", one(5, 1e4)),
            ("gaussian + outlier 1000", one(17, 1000.0, g)),
            ("gaussian + outlier -1e5", one(63, -1e5, g)),
            ("constant 1", np.full(QK_TURBO, 1.0, np.float32)),
            ("constant -3.5", np.full(QK_TURBO, -3.5, np.float32)),
            ("alternating +-1", np.tile(np.float32([1, -1]), 32)),
            ("ramp", np.linspace(-1, 1, QK_TURBO, dtype=np.float32))]
    for s in (1e-3, 1e-6, 1e-8, 3e-9, 1e-12, 1e-20, 1e-22, 1e-30, 1e-38, 1e-40, 1e-45):
        out += [(f"gaussian*{s:g}", (g * np.float32(s)).astype(np.float32)),
                (f"constant {s:g}", np.full(QK_TURBO, s, np.float32)),
                (f"single {s:g}", one(3, s))]
    for s in (6e4, 6.5e4, 65504.0, 7e4, 1e5, 1e18):
        out += [(f"gaussian*{s:g}", (g * np.float32(s)).astype(np.float32)),
                (f"constant {s:g}", np.full(QK_TURBO, s, np.float32)),
                (f"constant -{s:g}", np.full(QK_TURBO, -s, np.float32)),
                (f"single {s:g}", one(40, s))]
    labels = [lab for lab, _ in out]
    return labels, np.stack([b for _, b in out]).astype(np.float32)


EDGE_LABELS, EDGE = edge_blocks()


def near_boundary_blocks(name: str, n: int, rng) -> np.ndarray:
    """Blocks whose normalised coordinates land on or within a few ulps of the decision
    boundaries: 16 coordinates are +-boundary values, one filler makes ||x|| ~= 1 and the
    rest are 0 (exactly on the middle boundary)."""
    b = boundaries_f32(name)
    x = np.zeros((n, QK_TURBO), dtype=np.float32)
    pos = np.argsort(rng.random((n, QK_TURBO)), axis=1)[:, :17]
    vals = rng.choice(b[b != 0], size=(n, 16)) * rng.choice(np.float32([1, -1]), size=(n, 16))
    np.put_along_axis(x, pos[:, :16], vals.astype(np.float32), axis=1)
    rest = 1.0 - (x.astype(np.float64) ** 2).sum(axis=1)
    np.put_along_axis(x, pos[:, 16:], np.sqrt(rest).astype(np.float32)[:, None], axis=1)
    return x


@pytest.fixture(scope="module")
def blocks() -> np.ndarray:
    """>= 100k random blocks: Gaussian, Gaussian with lognormal per-block scales, Student-t
    heavy tails (df 3 and Cauchy), near-boundary blocks of each codebook, then the edge blocks."""
    rng = np.random.default_rng(1234)
    parts = [
        rng.standard_normal((40_000, QK_TURBO)),
        rng.standard_normal((30_000, QK_TURBO)) * np.exp(rng.normal(0.0, 2.5, size=(30_000, 1))),
        rng.standard_t(3, size=(25_000, QK_TURBO)) * np.exp(rng.normal(0.0, 1.0, size=(25_000, 1))),
        rng.standard_cauchy(size=(5_000, QK_TURBO)),
    ]
    parts += [near_boundary_blocks(name, 1000, rng) for name in NAMES]
    x = np.concatenate([p.astype(np.float32) for p in parts] + [EDGE])
    assert len(x) - len(EDGE) >= N_RANDOM and np.all(np.isfinite(x))
    return x


def _subset(blocks: np.ndarray) -> np.ndarray:
    """~27k of the blocks: 5k of each random kind, all near-boundary and edge blocks."""
    return np.concatenate([blocks[0:5000], blocks[40_000:45_000], blocks[70_000:75_000],
                           blocks[95_000:]])


_ref_cache: dict = {}


def ref_bytes(name: str, encode: str, x: np.ndarray) -> np.ndarray:
    key = (name, encode, id(x))
    if key not in _ref_cache:
        _ref_cache[key] = REF[name].quantize_blocks(x, encode=encode)
    return _ref_cache[key]


def _describe_mismatch(lib, name, encode, x, got, want) -> str:
    bad = np.nonzero((got != want).any(axis=1))[0]
    lines = [f"{name} {encode}: {len(bad)} of {len(x)} blocks differ (C vs reference)"]
    for i in bad[:3]:
        label = EDGE_LABELS[i - (len(x) - len(EDGE))] if i >= len(x) - len(EDGE) else "random"
        lines.append(f"  block {i} ({label}):")
        lines.append(f"    C   {got[i].tobytes().hex()}")
        lines.append(f"    ref {want[i].tobytes().hex()}")
    if len(bad):
        i = bad[0]
        fn = "quantize_row_turbo%s_0%s" % (name[-1], "_ref" if encode == "norm" else "")
        lines.append("  reproducer: x = np.array(%s, dtype=np.uint32).view(np.float32); compare %s(x, y, 64) "
                     "with codec.TYPES['%s_0'].quantize_blocks(x[None], encode='%s')"
                     % (x[i].view(np.uint32).tolist(), fn, name, encode))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------
# registry


def test_type_registry(lib):
    count = lib.ggml_type_count()
    info = {name: cachetypes.type_info(name) for name in NAMES}
    expect = {"turbo4": (34, 4.25), "turbo3": (26, 3.25), "turbo2": (18, 2.25)}
    for name, ti in info.items():
        assert ti.name == name
        assert ti.block_size == 64
        assert (ti.type_size, ti.bits_per_value) == expect[name]
        assert ti.type_size == REF[name].type_size
        assert lib.ggml_type_name(ti.id).decode() == name
    ids = sorted(ti.id for ti in info.values())
    # appended after upstream's last type (42 = Q2_0), GGML_TYPE_COUNT bumped
    assert ids[0] > 42 and ids == list(range(ids[0], ids[0] + 3)) and count == ids[-1] + 1
    print(f"\nggml_type_count() = {count}; ids {{{', '.join(f'{n}: {t.id}' for n, t in info.items())}}}; "
          f"simd level {lib.ggml_turbo_simd_level()}")


class _TypeTraits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


@pytest.mark.parametrize("name", NAMES)
def test_type_traits_wiring(lib, name):
    """ggml's type traits point at the turbo row functions; ggml_quantize_chunk uses the
    scale-search encoder."""
    tid = cachetypes.ggml_type_id(name)
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    tr = lib.ggml_get_type_traits(tid).contents
    n = name[-1]
    addr = lambda fn: ctypes.cast(getattr(lib, fn), ctypes.c_void_p).value  # noqa: E731
    assert tr.type_name.decode() == name and tr.blck_size == 64 and tr.is_quantized
    assert tr.to_float == addr(f"dequantize_row_turbo{n}_0")
    assert tr.from_float_ref == addr(f"quantize_row_turbo{n}_0_ref")

    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    assert lib.ggml_row_size(tid, 256) == 4 * REF[name].type_size
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    x = np.random.default_rng(5).standard_normal((6, 256)).astype(np.float32)
    dst = np.zeros(6 * 4 * REF[name].type_size, dtype=np.uint8)
    assert lib.ggml_quantize_chunk(tid, _ptr(x), _ptr(dst), 0, 6, 256, None) == dst.size
    np.testing.assert_array_equal(dst.reshape(-1, REF[name].type_size), c_quantize(lib, name, x, "search"))


# ----------------------------------------------------------------------------------------
# encoders: bit-exact with the reference


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize("name", NAMES)
def test_quantize_bit_exact(lib, blocks, name, encode):
    got = c_quantize(lib, name, blocks, encode)
    want = ref_bytes(name, encode, blocks)
    assert np.array_equal(got, want), _describe_mismatch(lib, name, encode, blocks, got, want)


@pytest.mark.parametrize("name", NAMES)
def test_edge_blocks_c(lib, name):
    """Properties of the C output itself on the edge blocks (no reference involved)."""
    levels = LEVELS[name]
    lab = {label: i for i, label in enumerate(EDGE_LABELS)}
    for encode in ENCODERS:
        raw = c_quantize(lib, name, EDGE, encode)
        d_bits = raw[:, :2].copy().view("<u2").reshape(-1)
        y = c_dequantize(lib, name, raw)
        assert np.all(d_bits & 0x7C00 != 0x7C00), "inf/NaN scale written"
        assert np.all(np.isfinite(y))
        for zero in ("zeros", "negative zeros", "constant 1e-45", "single 1e-30"):
            # zero norm (or a norm that underflows in float32): d = 0, indices of the centroid
            # nearest 0, decodes to zeros
            i = lab[zero]
            assert d_bits[i] == 0, zero
            assert np.all(REF[name].unpack(raw[i:i + 1])[1] == levels // 2 - 1), zero
            assert np.all(y[i] == 0), zero
        for sat in ("constant 60000", "constant -60000", "constant 65504", "constant 70000", "single 100000",
                    "constant 1e+18", "gaussian*70000"):
            assert d_bits[lab[sat]] == FP16_MAX_BITS, (sat, encode, hex(d_bits[lab[sat]]))
        # the norm encoder keeps ||x|| up to the fp16 rounding of d (d in the normal fp16 range)
        if encode == "norm":
            for lb in ("gaussian*0.001", "constant -3.5", "gaussian + outlier 1000", "ramp", "alternating +-1"):
                i = lab[lb]
                r = np.linalg.norm(y[i].astype(np.float64)) / np.linalg.norm(EDGE[i].astype(np.float64))
                assert abs(r - 1) < 2.0 ** -11 + 1e-6, (lb, r)
        # 1e-8 inputs: d is an fp16 subnormal, not flushed to zero
        assert 0 < d_bits[lab["constant 1e-08"]] < 0x0400


# ----------------------------------------------------------------------------------------
# decoder and vec_dot


@pytest.mark.parametrize("name", NAMES)
def test_dequantize_bit_exact(lib, blocks, name):
    T = REF[name]
    raws = [c_quantize(lib, name, blocks, enc) for enc in ENCODERS]
    rng = np.random.default_rng(11)
    rnd = rng.integers(0, 256, size=(50_000, T.type_size), dtype=np.uint8)
    bits = rng.integers(0, 0x7C00, size=len(rnd), dtype=np.uint16)  # every finite fp16 incl. subnormals
    bits[1::2] |= 0x8000
    rnd[:, :2] = bits.view(np.uint8).reshape(-1, 2)
    for raw in raws + [rnd]:
        got = c_dequantize(lib, name, raw)
        want = T.dequantize_blocks(raw)
        bad = np.nonzero((got.view(np.uint32) != want.view(np.uint32)).any(axis=1))[0]
        assert len(bad) == 0, (f"{len(bad)} blocks decode differently; first block bytes "
                               f"{raw[bad[0]].tobytes().hex()}: C {got[bad[0]][:4]} ref {want[bad[0]][:4]}")


@pytest.mark.parametrize("name", NAMES)
def test_vec_dot_equals_dequantize_dot(lib, name):
    rng = np.random.default_rng(3)
    T = REF[name]
    worst = 0.0
    for n_blocks in (1, 2, 4, 8):  # head dims 64 ... 512
        for trial in range(300):
            x = rng.standard_normal(64 * n_blocks).astype(np.float32) * np.float32(np.exp(rng.normal(0, 2)))
            raw = c_quantize(lib, name, x, "search" if trial % 2 else "norm").reshape(-1)
            y = (rng.standard_normal(64 * n_blocks) * np.exp(rng.normal(0, 2))).astype(np.float32)
            s = c_vec_dot(lib, name, raw, y)
            deq = T.dequantize_blocks(raw).reshape(-1).astype(np.float64)
            exact = float(deq @ y.astype(np.float64))
            scale = float(np.abs(deq * y).sum())
            err = abs(s - exact) / max(scale, 1e-30)
            worst = max(worst, err)
            assert err < 1e-5, (n_blocks, trial, s, exact, scale)
    print(f"\n{name} vec_dot: worst |s - deq.y| / sum|deq*y| = {worst:.2e}")


# ----------------------------------------------------------------------------------------
# distortion of the C encoders


@pytest.fixture(scope="module")
def gaussian_100k() -> np.ndarray:
    return np.random.default_rng(777).standard_normal((100_000, QK_TURBO)).astype(np.float32)


def _relative_mse(x, y) -> float:
    x = x.astype(np.float64)
    return float(((y.astype(np.float64) - x) ** 2).sum() / (x * x).sum())


@pytest.mark.parametrize("name", NAMES)
def test_c_mse_matches_theory(lib, gaussian_100k, name):
    x = gaussian_100k
    norm = _relative_mse(x, c_dequantize(lib, name, c_quantize(lib, name, x, "norm")))
    search = _relative_mse(x, c_dequantize(lib, name, c_quantize(lib, name, x, "search")))
    theory = expected_relative_mse(name)
    print(f"\n{name} C (100k Gaussian blocks): norm {norm:.5f}  theory {theory:.5f}  "
          f"norm/theory {norm / theory:.4f}  search {search:.5f}  search/norm {search / norm:.4f}")
    assert abs(norm / theory - 1) < 0.05
    assert search < norm


# ----------------------------------------------------------------------------------------
# SIMD vs portable code


_CHILD = textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import test_native_codec as t
    from tqgguf.cachetypes import libggml_base
    lib = t._bind(libggml_base())
    x = np.load(sys.argv[2])
    rnd = {n: np.load(sys.argv[3] + n + ".npy") for n in t.NAMES}
    y = np.load(sys.argv[4])
    out, dots = {}, {}
    for n in t.NAMES:
        for e in t.ENCODERS:
            out[f"q_{n}_{e}"] = t.c_quantize(lib, n, x, e)
        out[f"dq_{n}"] = t.c_dequantize(lib, n, rnd[n])
        dots[n] = [t.c_vec_dot(lib, n, rnd[n][i:i + 8].reshape(-1), y) for i in range(0, 4000, 8)]
    multi = {n: t.multi_dot_mismatches(lib, n, rnd[n], np.random.default_rng(5)) for n in t.NAMES}
    np.savez(sys.argv[5], **out)
    print(json.dumps({"simd": lib.ggml_turbo_simd_level(), "dots": dots, "multi": multi}))
""")


def _run_child(tmp_path: Path, level: int | None, args: list[str]) -> tuple[dict, dict]:
    """Run _CHILD with the SIMD level capped at `level` (0 = portable code, None = no cap)."""
    env = dict(os.environ)
    env.pop("GGML_TURBO_NO_SIMD", None)
    env.pop("GGML_TURBO_SIMD_MAX", None)
    if level == 0:
        env["GGML_TURBO_NO_SIMD"] = "1"
    elif level is not None:
        env["GGML_TURBO_SIMD_MAX"] = str(level)
    res = tmp_path / f"level{level}.npz"
    proc = subprocess.run([sys.executable, "-c", _CHILD, *args, str(res)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(res) as z:
        return meta, {k: z[k] for k in z.files}


def test_simd_and_portable_paths_agree(lib, blocks, tmp_path):
    """Every SIMD level this CPU has (1 = AVX2, 2 = AVX-512 decoders) against the portable
    code: encoder bytes and dequantized floats identical, vec_dot within float rounding."""
    rng = np.random.default_rng(21)
    np.save(tmp_path / "x.npy", _subset(blocks))
    for name in NAMES:
        rnd = rng.integers(0, 256, size=(4000, REF[name].type_size), dtype=np.uint8)
        bits = rng.integers(0, 0x7C00, size=len(rnd), dtype=np.uint16)  # finite fp16
        bits |= (rng.integers(0, 2, len(rnd)) << 15).astype(np.uint16)
        rnd[:, :2] = bits.view(np.uint8).reshape(-1, 2)
        np.save(tmp_path / f"rnd_{name}.npy", rnd)
    np.save(tmp_path / "y.npy", rng.standard_normal(8 * 64).astype(np.float32))
    args = [str(Path(__file__).parent), str(tmp_path / "x.npy"), str(tmp_path / "rnd_"), str(tmp_path / "y.npy")]
    meta_p, port = _run_child(tmp_path, 0, args)
    assert meta_p["simd"] == 0, "GGML_TURBO_NO_SIMD=1 did not select the portable code"
    assert meta_p["multi"] == {n: 0 for n in NAMES}, f"portable code: vec_dot_multi differs from vec_dot {meta_p['multi']}"
    best = lib.ggml_turbo_simd_level()
    if best == 0:
        pytest.skip("this CPU has no AVX2+FMA+F16C path; only the portable code exists")
    for level in range(1, best + 1):
        meta_s, simd = _run_child(tmp_path, level, args)
        assert meta_s["simd"] == level, f"GGML_TURBO_SIMD_MAX={level} gave level {meta_s['simd']}"
        assert meta_s["multi"] == {n: 0 for n in NAMES}, f"level {level}: vec_dot_multi differs from vec_dot {meta_s['multi']}"
        for key in simd:
            a, b = simd[key], port[key]
            if key.startswith("dq_"):
                a, b = a.view(np.uint32), b.view(np.uint32)
            bad = np.nonzero((a != b).reshape(len(a), -1).any(axis=1))[0]
            assert len(bad) == 0, (f"{key}: {len(bad)} blocks differ between SIMD level {level} and the portable "
                                   f"code, first {bad[:5]}")
        for name in NAMES:
            a, b = np.array(meta_s["dots"][name]), np.array(meta_p["dots"][name])
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * np.abs(b).max(), err_msg=f"{name} level {level}")
    print(f"\nSIMD levels 1..{best} agree with the portable code")
