"""The numpy reference of the turbo formats (no engine needed).

Covers: the Lloyd-Max codebooks (recomputed here by an independent method), the generated C
header, the reference encoders' distortion against theory, packing and the bit layout of
docs/DESIGN.md ("The formats").
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tqgguf.reference import codebook
from tqgguf.reference.codebook import (
    LEVELS, QK_TURBO, boundaries_f32, centroids_f32, expected_relative_mse, lloyd_max)
from tqgguf.reference.codec import SEARCH_INV_GRID, TYPES

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "native" / "ggml" / "src" / "ggml-turbo-tables.h"

#: ggml type name (``turbo4``) -> reference class name (``turbo4_0``)
REF = {name: TYPES[f"{name}_0"] for name in LEVELS}
TYPE_NAMES = ("turbo4", "turbo3", "turbo2")


# ----------------------------------------------------------------------------------------
# codebook, recomputed independently


def _grid_lloyd(levels: int, d: int = QK_TURBO, n: int = 400_001, tol: float = 1e-14,
                max_iter: int = 100_000) -> tuple[np.ndarray, float]:
    """Lloyd-Max for the sphere marginal by a different method than codebook.lloyd_max:
    unnormalised density (1-t^2)^((d-3)/2) on a fine uniform grid, cumulative trapezoid
    integrals of f, t f, t^2 f read by linear interpolation at the cell edges, started from
    equal-mass cells (codebook.py uses Gauss-Legendre per cell and a linspace start).
    Returns (centroids ascending, relative MSE = per-coordinate MSE * d)."""
    t = np.linspace(-1.0, 1.0, n)
    f = np.clip(1.0 - t * t, 0.0, None) ** ((d - 3) / 2)
    h = t[1] - t[0]

    def cum(g):
        return np.concatenate(([0.0], np.cumsum(0.5 * h * (g[1:] + g[:-1]))))

    F0, F1, F2 = cum(f), cum(t * f), cum(t * t * f)

    def moments(edges):
        return tuple(np.diff(np.interp(edges, t, F)) for F in (F0, F1, F2))

    edges = np.interp(np.linspace(0.0, F0[-1], levels + 1), F0, t)
    for _ in range(max_iter):
        m0, m1, _m2 = moments(edges)
        c = m1 / m0
        new = np.concatenate(([-1.0], 0.5 * (c[1:] + c[:-1]), [1.0]))
        moved = np.max(np.abs(new - edges))
        edges = new
        if moved < tol:
            break
    m0, m1, m2 = moments(edges)
    c = m1 / m0
    mse = float((m2 - 2 * c * m1 + c * c * m0).sum() / F0[-1])
    return c, mse * d


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_codebook_matches_independent_lloyd(name):
    levels = LEVELS[name]
    c_ref, mse_ref = lloyd_max(levels)
    c_grid, mse_grid = _grid_lloyd(levels)
    np.testing.assert_allclose(np.array(c_ref), c_grid, rtol=0, atol=1e-6)
    assert mse_ref == pytest.approx(mse_grid, rel=1e-5)
    assert expected_relative_mse(name) == mse_ref


def test_sphere_marginal_pdf_is_a_density_with_variance_1_over_d():
    trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2 has only trapz
    t = np.linspace(-1, 1, 200_001)
    f = codebook.sphere_marginal_pdf(t)
    assert trapezoid(f, t) == pytest.approx(1.0, rel=1e-9)
    assert trapezoid(t * t * f, t) == pytest.approx(1.0 / QK_TURBO, rel=1e-9)


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_centroids_symmetric_ascending(name):
    levels = LEVELS[name]
    c64 = np.array(lloyd_max(levels)[0])
    assert len(c64) == levels
    assert np.all(np.diff(c64) > 0)
    np.testing.assert_array_equal(c64, -c64[::-1])
    c32 = centroids_f32(name)
    assert c32.dtype == np.float32 and np.all(np.diff(c32) > 0)
    np.testing.assert_array_equal(c32, -c32[::-1])
    b = boundaries_f32(name)
    assert b.dtype == np.float32 and len(b) == levels - 1
    assert np.all(np.diff(b) > 0)
    assert b[levels // 2 - 1] == 0.0
    np.testing.assert_array_equal(b, -b[::-1])
    # boundaries sit between the centroids they separate
    assert np.all((c32[:-1] < b) & (b < c32[1:]))


def test_codebook_sanity_figures():
    # DESIGN.md: in units of 1/sqrt(64) the 16 levels run +-0.127 ... +-2.646
    c = np.array(lloyd_max(16)[0]) * np.sqrt(QK_TURBO)
    assert c[8] == pytest.approx(0.127, abs=1e-3)
    assert c[15] == pytest.approx(2.646, abs=1e-3)
    assert expected_relative_mse("turbo4") == pytest.approx(0.0091, abs=1e-4)
    assert expected_relative_mse("turbo3") == pytest.approx(0.033, abs=1e-3)
    assert expected_relative_mse("turbo4") < expected_relative_mse("turbo3") < expected_relative_mse("turbo2")


@pytest.mark.parametrize("name", ["turbo2", "turbo3", "turbo4"])
def test_code_step_fits_qmax_and_beats_the_plain_step(name):
    """code_step's 7-bit step: every code within +-63 (the sign-mode lookup needs bytes q + 64 < 0x80),
    and an expected error no worse than max|c|/63's and, for turbo4, than the int8 codes at max|c|/127
    (the figures in docs/CUDA.md "Session 23"), recomputed here from the cell masses by Monte Carlo."""
    c = np.array(lloyd_max(codebook.LEVELS[name])[0])
    step, err = codebook.code_step(name, 63)
    assert np.max(np.abs(np.round(c / step))) <= 63
    rng = np.random.default_rng(23)
    x = rng.standard_normal((200_000, QK_TURBO))
    t = (x / np.linalg.norm(x, axis=1, keepdims=True)).ravel()  # coordinates of uniform unit vectors
    idx = np.searchsorted(0.5 * (c[1:] + c[:-1]), t)

    def mc(s):  # relative expected squared error of the centroids as codes of step s
        return float(np.mean((np.round(c / s)[idx] * s - c[idx]) ** 2) * QK_TURBO)
    assert mc(step) == pytest.approx(err, rel=0.05)
    assert mc(step) <= mc(c[-1] / 63) * 1.0001
    if name == "turbo4":
        assert mc(step) < mc(c[-1] / 127)  # 0.43 % of the quantizer's MSE against 0.49 %
        assert err / expected_relative_mse(name) == pytest.approx(0.0043, abs=0.0005)
    with pytest.raises(ValueError):
        codebook.code_step(name, 0)


def test_lloyd_max_rejects_bad_arguments():
    with pytest.raises(ValueError):
        lloyd_max(3)
    with pytest.raises(ValueError):
        lloyd_max(0)
    with pytest.raises(ValueError):
        lloyd_max(4, d=2)


# ----------------------------------------------------------------------------------------
# the generated C header


def test_header_is_up_to_date():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "maintain" / "gen_turbo_tables.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def _header_floats(text: str, macro: str) -> np.ndarray:
    m = re.search(rf"#define {macro} \{{ (.*?) \}}", text)
    assert m, f"{macro} missing from {HEADER}"
    return np.array([float(v.rstrip("f")) for v in m.group(1).split(",")], dtype=np.float32)


def test_header_values_equal_reference_float32():
    """Parse the header (independently of the generator's renderer): every constant reads
    back as exactly the float32 value the reference uses."""
    text = HEADER.read_text()
    for name in TYPE_NAMES:
        up = name.upper()
        assert re.search(rf"#define GGML_{up}_LEVELS {LEVELS[name]}\b", text)
        np.testing.assert_array_equal(_header_floats(text, f"GGML_{up}_CENTROIDS"), centroids_f32(name))
        np.testing.assert_array_equal(_header_floats(text, f"GGML_{up}_BOUNDARIES"), boundaries_f32(name))
    assert re.search(rf"#define GGML_TURBO_SEARCH_STEPS {len(SEARCH_INV_GRID)}\b", text)
    np.testing.assert_array_equal(_header_floats(text, "GGML_TURBO_SEARCH_INV_GRID"), SEARCH_INV_GRID)
    np.testing.assert_array_equal(
        SEARCH_INV_GRID, (1.0 / (0.75 + 0.05 * np.arange(16))).astype(np.float32))


# ----------------------------------------------------------------------------------------
# distortion of the reference encoders


def _relative_mse(x: np.ndarray, y: np.ndarray) -> float:
    x = x.astype(np.float64)
    return float(((y.astype(np.float64) - x) ** 2).sum() / (x * x).sum())


@pytest.fixture(scope="module")
def gaussian_blocks() -> np.ndarray:
    return np.random.default_rng(20240601).standard_normal((100_000, QK_TURBO)).astype(np.float32)


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_norm_encoder_mse_matches_theory(name, gaussian_blocks):
    T = REF[name]
    x = gaussian_blocks
    mse = _relative_mse(x, T.dequantize_blocks(T.quantize_blocks(x, encode="norm")))
    theory = expected_relative_mse(name)
    print(f"\n{name} reference norm: relative MSE {mse:.5f}, theory {theory:.5f}, ratio {mse / theory:.4f}")
    assert abs(mse / theory - 1) < 0.05


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_search_encoder_beats_norm(name, gaussian_blocks):
    T = REF[name]
    x = gaussian_blocks[:20_000]
    norm = _relative_mse(x, T.dequantize_blocks(T.quantize_blocks(x, encode="norm")))
    search = _relative_mse(x, T.dequantize_blocks(T.quantize_blocks(x, encode="search")))
    print(f"\n{name} reference: search {search:.5f} < norm {norm:.5f} ({search / norm - 1:+.1%})")
    assert search < norm


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_norm_encoder_keeps_l2_norm(name, gaussian_blocks):
    T = REF[name]
    x = gaussian_blocks[:5000] * np.float32(3.0)
    y = T.dequantize_blocks(T.quantize_blocks(x, encode="norm"))
    ratio = np.linalg.norm(y.astype(np.float64), axis=1) / np.linalg.norm(x.astype(np.float64), axis=1)
    assert np.max(np.abs(ratio - 1)) < 2.0 ** -11 + 1e-6  # only the fp16 rounding of d


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_norm_encoder_indices_are_nearest_centroids(name, gaussian_blocks):
    """Indices of the norm encoder = brute-force argmin |u - c| with u = x * (1/||x||) in
    float32, except within rounding of a decision boundary."""
    T = REF[name]
    x = gaussian_blocks[:5000]
    _, idx = T.encode(x, encode="norm")
    n = np.sqrt((x.astype(np.float64) ** 2).sum(axis=1)).astype(np.float32)
    u = x * (np.float32(1) / n)[:, None]
    c = centroids_f32(name).astype(np.float64)
    brute = np.argmin(np.abs(u[..., None].astype(np.float64) - c), axis=-1)
    differ = brute != idx
    if differ.any():
        b = boundaries_f32(name).astype(np.float64)
        gap = np.min(np.abs(u[differ][:, None].astype(np.float64) - b), axis=-1)
        assert np.all(gap < 1e-6), gap.max()
    assert differ.mean() < 1e-4


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_encoder_edge_blocks(name):
    T = REF[name]
    levels = LEVELS[name]
    x = np.zeros((4, QK_TURBO), dtype=np.float32)
    x[1, 7] = 7e4            # one value past fp16 range: scale saturates at 65504, not inf
    x[2, :] = 6e4            # constant near fp16 max
    x[3, :] = 1e-8           # tiny: d is an fp16 subnormal
    for enc in ("norm", "search"):
        d, idx = T.encode(x, encode=enc)
        # all-zero block: d = 0, every index the one of the centroid nearest 0 (ties: the
        # lower one, as the number of boundaries strictly below 0)
        assert d[0] == 0 and np.all(idx[0] == levels // 2 - 1)
        assert np.all(T.decode(d[:1], idx[:1]) == 0)
        # the norm scale ||x|| / ||c[idx]|| exceeds 65504 in both blocks; the least-squares
        # scale of the search encoder can stay below it (turbo2: 7e4 * 0.1875 / 0.236)
        assert np.all(np.isfinite(d)) and np.all(d <= np.float16(65504))
        assert d[2] == np.float16(65504)
        if enc == "norm":
            assert d[1] == np.float16(65504)
        assert 0 < d[3] < np.float16(6.1e-5)  # subnormal fp16, not flushed to zero
        raw = T.quantize_blocks(x, encode=enc)
        assert raw[2, :2].tobytes() == b"\xff\x7b"  # 65504 little-endian


def _canonical_sum64(a: np.ndarray) -> np.ndarray:
    """ggml-turbo.c turbo_sum64: acc[l] = sum_r a[8r + l] (r ascending), then
    ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)), all float32."""
    p = np.asarray(a, dtype=np.float32).reshape(a.shape[:-1] + (8, 8))
    acc = np.zeros(a.shape[:-1] + (8,), dtype=np.float32)
    for r in range(8):
        acc = acc + p[..., r, :]
    return ((acc[..., 0] + acc[..., 4]) + (acc[..., 2] + acc[..., 6])) + \
           ((acc[..., 1] + acc[..., 5]) + (acc[..., 3] + acc[..., 7]))


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_reference_sums_in_c_order(name, gaussian_blocks):
    """The norm encoder's scale, recomputed with the summation order ggml-turbo.c uses."""
    T = REF[name]
    x = gaussian_blocks[:50_000]
    d, idx = T.encode(x, encode="norm")
    c = centroids_f32(name)[idx]
    want = (np.sqrt(_canonical_sum64(x * x)) / np.sqrt(_canonical_sum64(c * c))).astype(np.float16)
    bad = np.nonzero(want.view(np.uint16) != d.view(np.uint16))[0]
    assert len(bad) == 0, f"{len(bad)} blocks differ, first {bad[:5].tolist()}"


# ----------------------------------------------------------------------------------------
# bytes: sizes, pack/unpack, bit layout


def test_block_sizes():
    assert {n: T.type_size for n, T in TYPES.items()} == {"turbo4_0": 34, "turbo3_0": 26, "turbo2_0": 18}
    for n, T in TYPES.items():
        assert T.block_size == QK_TURBO == 64
        assert 8 * T.type_size / T.block_size == T.bits + 0.25
        raw = T.quantize_blocks(np.ones((3, 64), np.float32))
        assert raw.shape == (3, T.type_size) and raw.dtype == np.uint8
        assert len(T.quantize_rows(np.ones(128, np.float32))) == 2 * T.type_size
    with pytest.raises(ValueError):
        TYPES["turbo4_0"].quantize_rows(np.ones(65, np.float32))
    with pytest.raises(ValueError):
        TYPES["turbo4_0"].encode(np.ones((2, 32), np.float32))
    with pytest.raises(ValueError):
        TYPES["turbo4_0"].encode(np.ones((2, 64), np.float32), encode="nope")


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_pack_unpack_roundtrip(name):
    T = REF[name]
    rng = np.random.default_rng(7)
    n = 2000
    idx = rng.integers(0, LEVELS[name], size=(n, QK_TURBO), dtype=np.uint8)
    bits = rng.integers(0, 0x7C00, size=n, dtype=np.uint16)  # finite fp16, both signs below
    bits[::2] |= 0x8000
    d = bits.view(np.float16)
    raw = T.pack(d, idx)
    assert raw.shape == (n, T.type_size) and raw.dtype == np.uint8
    d2, idx2 = T.unpack(raw)
    np.testing.assert_array_equal(d2.view(np.uint16), bits)
    np.testing.assert_array_equal(idx2, idx)
    # every byte pattern is a valid block: unpack -> pack is the identity on bytes
    rawr = rng.integers(0, 256, size=(n, T.type_size), dtype=np.uint8)
    np.testing.assert_array_equal(T.pack(*T.unpack(rawr)), rawr)


def _one_block(T, d: float, pattern: dict[int, int]) -> bytes:
    idx = np.zeros((1, QK_TURBO), dtype=np.uint8)
    for j, v in pattern.items():
        idx[0, j] = v
    return T.pack(np.array([d], dtype=np.float16), idx).tobytes()


def test_bit_layout_turbo4():
    T = TYPES["turbo4_0"]
    # d first, little-endian fp16; element j < 32 -> low nibble of qs[j], j + 32 -> high nibble
    want = bytearray(34)
    want[0:2] = b"\x00\x3c"  # 1.0
    want[2 + 0] = 0xAF        # elements 0 (0xF) and 32 (0xA)
    want[2 + 5] = 0x03        # element 5 = 3
    want[2 + 31] = 0x21       # elements 31 (1) and 63 (2)
    assert _one_block(T, 1.0, {0: 0xF, 32: 0xA, 5: 3, 31: 1, 63: 2}) == bytes(want)
    # a full ramp: idx_j = j % 16 -> qs[j] = (j % 16) | ((j + 32) % 16) << 4 = 0x11 * (j % 16)
    raw = T.pack(np.array([-2.0], np.float16), (np.arange(64) % 16).astype(np.uint8)[None])
    assert raw[0, :2].tobytes() == b"\x00\xc0"
    assert raw[0, 2:].tolist() == [0x11 * (j % 16) for j in range(32)]


def test_bit_layout_turbo3():
    T = TYPES["turbo3_0"]
    # 8 words w_l = qs[l] | qs[l + 8] << 8 | qs[l + 16] << 16; element j = 8r + l at bits 3r of w_l
    want = bytearray(26)
    want[0:2] = b"\x00\x3c"
    want[2 + 0] = 0b001              # element 0 = 0b001: w_0 bits 0..2 -> qs[0] bits 0..2
    want[2 + 4] = 0b100              # element 4 = 0b100: w_4 bits 0..2 -> qs[4] bit 2
    want[2 + 2] = 0b101 << 3         # element 10 = 0b101 (r 1, l 2): w_2 bits 3..5 -> qs[2] bits 3..5
    want[2 + 10] = 0b1 << 7          # element 42 = 0b011 (r 5, l 2): w_2 bits 15..17 -> qs[10] bit 7
    want[2 + 18] = 0b1               #                                and qs[18] bit 0
    want[2 + 1] = 0b10 << 6          # element 17 = 0b110 (r 2, l 1): w_1 bits 6..8 -> qs[1] bits 6..7
    want[2 + 9] = 0b1                #                                and qs[9] bit 0
    want[2 + 23] = 0b111 << 5        # element 63 = 0b111 (r 7, l 7): w_7 bits 21..23 -> qs[23] bits 5..7
    assert _one_block(T, 1.0, {0: 0b001, 4: 0b100, 10: 0b101, 42: 0b011, 17: 0b110, 63: 0b111}) == bytes(want)
    # idx_j = j // 8 (= r): every word is 0o76543210 = 0xFAC688 -> qs = 8 x 0x88, 8 x 0xC6, 8 x 0xFA
    raw = T.pack(np.array([1.0], np.float16), (np.arange(64) // 8).astype(np.uint8)[None])
    assert raw[0, 2:].tolist() == [0x88] * 8 + [0xC6] * 8 + [0xFA] * 8
    # idx_j = j % 8 (= l): w_l = l * 0o11111111 = l * 0x249249
    raw = T.pack(np.array([1.0], np.float16), (np.arange(64) % 8).astype(np.uint8)[None])
    assert raw[0, 2:].tolist() == [(l * 0x249249 >> 8 * k) & 255 for k in range(3) for l in range(8)]


def test_bit_layout_turbo2():
    T = TYPES["turbo2_0"]
    want = bytearray(18)
    want[0:2] = b"\x00\x3c"
    want[2 + 8] = 0b11 << 4          # element 40: qs[8] bits 4..5
    want[2 + 0] = 0b10 | (0b01 << 6)  # element 0 = 2 (bits 0..1), element 48 = 1 (bits 6..7)
    want[2 + 15] = 0b11 << 2         # element 31: qs[15] bits 2..3
    assert _one_block(T, 1.0, {40: 3, 0: 2, 48: 1, 31: 3}) == bytes(want)


@pytest.mark.parametrize("name", TYPE_NAMES)
def test_decode_known_bytes(name):
    """d = 1.5 and index pattern j % levels decodes to 1.5 * c[j % levels] exactly."""
    T = REF[name]
    levels = LEVELS[name]
    idx = (np.arange(64) % levels).astype(np.uint8)[None]
    raw = T.pack(np.array([1.5], np.float16), idx)
    y = T.dequantize_blocks(raw)
    np.testing.assert_array_equal(y[0], np.float32(1.5) * centroids_f32(name)[np.arange(64) % levels])
    np.testing.assert_array_equal(T.dequantize_rows(raw.tobytes()), y[0])
