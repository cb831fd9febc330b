"""Numpy reference of the turbo block formats, bit-exact with ``native/ggml/src/ggml-turbo.c``.

Shaped like gguf-py's ``gguf/quants.py``: one class per type, ``quantize_blocks`` /
``dequantize_blocks`` on ``(n_blocks, 64)`` arrays, plus row helpers. Every float
operation is done in float32 in the same order as the C code, so the bytes agree exactly:
sums over a block use the C code's canonical order (8 lane sums acc[l] = sum_r a[8r+l],
then ((acc0+acc4)+(acc2+acc6)) + ((acc1+acc5)+(acc3+acc7)), which is also what the AVX2
path computes) and there is no fused multiply-add.

Formats (normative, see docs/DESIGN.md; one block = 64 values):

============  ======================================  =====  ==========
type          layout                                  bytes  bits/value
============  ======================================  =====  ==========
turbo4_0      fp16 d; qs[32] 4-bit indices            34     4.25
turbo3_0      fp16 d; qs[24] 3-bit indices            26     3.25
turbo2_0      fp16 d; qs[16] 2-bit indices            18     2.25
============  ======================================  =====  ==========

Bit layout: turbo4 element j < 32 in the low nibble of qs[j], element j+32 in the high
nibble. turbo2: the 2 bits of element j sit in qs[j % 16] at bit 2*(j // 16). turbo3: the
24 bytes are 8 little-endian 24-bit words w_l = qs[l] | qs[l+8] << 8 | qs[l+16] << 16
(l = 0..7), and the 3 bits of element j = 8r + l are bits 3r .. 3r+2 of w_l (so SIMD code
gets elements 8r .. 8r+7 from the 8 words by one shift; docs/DESIGN.md, "Bit layout").

Decoding: y_j = d * c[idx_j] with c the Lloyd–Max centroids (``codebook.py``).
Two encoders share the format:

* ``encode="norm"`` (``quantize_row_*_ref`` in C): TurboQuant's nearest-centroid indices of
  u = x / ||x|| and the norm-corrected scale d = ||x|| / ||c[idx]|| (decoded block keeps
  the input's L2 norm, unbiased inner products).
* ``encode="search"`` (``quantize_row_*`` in C, what the CPU KV cache uses): indices of
  x / (||x|| g) for 16 grid values g in 0.75…1.50; keeps the candidate with the least
  squared error under its least-squares scale d = <x, c> / <c, c>. Same decoder;
  relative MSE turbo4 0.0089 → 0.0070 on Gaussian blocks (measured, docs/DESIGN.md).
"""

from __future__ import annotations

import numpy as np

from .codebook import QK_TURBO, boundaries_f32, centroids_f32

#: Inverse candidate scales 1/g for the search encoder, float32, g = 0.75 + 0.05 k.
SEARCH_INV_GRID = (1.0 / (0.75 + 0.05 * np.arange(16, dtype=np.float64))).astype(np.float32)

FP16_MAX = np.float32(65504.0)


def _seq_sum(a: np.ndarray) -> np.ndarray:
    """Float32 sum of 64 values over the last axis in the C code's canonical order
    (``turbo_sum64`` / ``turbo_hsum8_canonical`` in ggml-turbo.c)."""
    p = a.reshape(a.shape[:-1] + (8, 8))
    acc = np.zeros(a.shape[:-1] + (8,), dtype=np.float32)
    for r in range(8):
        acc = acc + p[..., r, :]
    return ((acc[..., 0] + acc[..., 4]) + (acc[..., 2] + acc[..., 6])) + \
        ((acc[..., 1] + acc[..., 5]) + (acc[..., 3] + acc[..., 7]))


class TurboType:
    """One turbo block type. Subclasses set ``name``, ``bits`` and ``type_size``."""

    name: str = ""
    bits: int = 0
    type_size: int = 0
    block_size: int = QK_TURBO

    @classmethod
    def centroids(cls) -> np.ndarray:
        return centroids_f32(cls.name.removesuffix("_0"))

    @classmethod
    def boundaries(cls) -> np.ndarray:
        return boundaries_f32(cls.name.removesuffix("_0"))

    # -- indices ---------------------------------------------------------------------
    @classmethod
    def nearest(cls, v: np.ndarray) -> np.ndarray:
        """Index of the nearest centroid: the number of boundaries strictly below v (NaN -> 0,
        as in C where every comparison with NaN is false)."""
        idx = np.searchsorted(cls.boundaries(), v, side="left").astype(np.uint8)
        return np.where(np.isnan(v), np.uint8(0), idx).astype(np.uint8)

    # -- encoders --------------------------------------------------------------------
    @classmethod
    def encode(cls, blocks: np.ndarray, encode: str = "search") -> tuple[np.ndarray, np.ndarray]:
        """Encode blocks.

        Args:
            blocks: float32 array (n_blocks, 64).
            encode: "search" (CPU KV-cache encoder) or "norm" (TurboQuant reference).
        Returns:
            (d as float16 array (n_blocks,), indices uint8 array (n_blocks, 64)).
        Raises:
            ValueError: wrong shape or encoder name.
        """
        x = np.ascontiguousarray(blocks, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != QK_TURBO:
            raise ValueError(f"blocks must have shape (n, {QK_TURBO}), got {x.shape}")
        c = cls.centroids()
        n = np.sqrt(_seq_sum(x * x))
        zero = n == np.float32(0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inv = np.where(zero, np.float32(0), np.float32(1) / np.where(zero, np.float32(1), n))
            inv = inv.astype(np.float32)
            if encode == "norm":
                idx = cls.nearest(x * inv[:, None])
                cc = c[idx]
                d = n / np.sqrt(_seq_sum(cc * cc))
            elif encode == "search":
                best_score = np.full(len(x), -1.0, dtype=np.float32)
                best_dot = np.zeros(len(x), dtype=np.float32)
                best_den = np.ones(len(x), dtype=np.float32)
                idx = np.zeros(x.shape, dtype=np.uint8)
                for g in SEARCH_INV_GRID:
                    s = (inv * g).astype(np.float32)
                    k = cls.nearest(x * s[:, None])
                    ck = c[k]
                    dot = _seq_sum(x * ck)
                    den = _seq_sum(ck * ck)
                    score = dot * dot / den
                    better = score > best_score
                    best_score = np.where(better, score, best_score)
                    best_dot = np.where(better, dot, best_dot)
                    best_den = np.where(better, den, best_den)
                    idx[better] = k[better]
                d = best_dot / best_den
            else:
                raise ValueError(f"encode must be 'search' or 'norm', got {encode!r}")
        d = np.where(zero, np.float32(0), d).astype(np.float32)
        d = np.clip(d, -FP16_MAX, FP16_MAX)
        return d.astype(np.float16), idx

    @classmethod
    def decode(cls, d: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """(n_blocks,) float16 scales and (n_blocks, 64) indices -> float32 (n_blocks, 64)."""
        return d.astype(np.float32)[:, None] * cls.centroids()[idx]

    # -- bytes -----------------------------------------------------------------------
    @classmethod
    def pack(cls, d: np.ndarray, idx: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def unpack(cls, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray, encode: str = "search") -> np.ndarray:
        """float32 (n_blocks, 64) -> uint8 (n_blocks, type_size), the C struct bytes."""
        return cls.pack(*cls.encode(blocks, encode))

    @classmethod
    def dequantize_blocks(cls, raw: np.ndarray) -> np.ndarray:
        """uint8 (n_blocks, type_size) -> float32 (n_blocks, 64)."""
        return cls.decode(*cls.unpack(np.asarray(raw, dtype=np.uint8).reshape(-1, cls.type_size)))

    @classmethod
    def quantize_rows(cls, x: np.ndarray, encode: str = "search") -> bytes:
        """float32 array whose size is a multiple of 64 -> packed bytes (row-major)."""
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        if x.size % QK_TURBO:
            raise ValueError(f"size {x.size} is not a multiple of {QK_TURBO}")
        return cls.quantize_blocks(x.reshape(-1, QK_TURBO), encode).tobytes()

    @classmethod
    def dequantize_rows(cls, raw: bytes) -> np.ndarray:
        """Packed bytes -> float32 1-D array."""
        return cls.dequantize_blocks(np.frombuffer(raw, dtype=np.uint8)).reshape(-1)


def _pack_2bit(idx: np.ndarray) -> np.ndarray:
    """Low 2 bits of element j at qs[j % 16] bit 2*(j // 16) -> (n, 16) uint8."""
    lo = (idx & 3).reshape(-1, 4, 16)
    return (lo[:, 0] | (lo[:, 1] << 2) | (lo[:, 2] << 4) | (lo[:, 3] << 6)).astype(np.uint8)


def _unpack_2bit(qs: np.ndarray) -> np.ndarray:
    return np.concatenate([(qs >> (2 * s)) & 3 for s in range(4)], axis=1).astype(np.uint8)


def _pack_3bit(idx: np.ndarray) -> np.ndarray:
    """3 bits of element j = 8r + l at bits 3r of the word w_l; w_l's bytes are qs[l],
    qs[l + 8], qs[l + 16] -> (n, 24) uint8."""
    rows = (idx & 7).astype(np.uint32).reshape(-1, 8, 8)  # [block, r, l]
    w = np.zeros((len(rows), 8), dtype=np.uint32)
    for r in range(8):
        w |= rows[:, r, :] << np.uint32(3 * r)
    return np.concatenate([w & 255, (w >> 8) & 255, w >> 16], axis=1).astype(np.uint8)


def _unpack_3bit(qs: np.ndarray) -> np.ndarray:
    q = qs.astype(np.uint32)
    w = q[:, 0:8] | (q[:, 8:16] << np.uint32(8)) | (q[:, 16:24] << np.uint32(16))
    return np.stack([(w >> np.uint32(3 * r)) & 7 for r in range(8)], axis=1).reshape(-1, 64).astype(np.uint8)


def _head(d: np.ndarray) -> np.ndarray:
    return d.astype("<f2").view(np.uint8).reshape(-1, 2)


class Turbo4_0(TurboType):
    """turbo4: 16 levels, 4.25 bits/value."""

    name, bits, type_size = "turbo4_0", 4, 34

    @classmethod
    def pack(cls, d, idx):
        qs = (idx[:, :32] & 15) | ((idx[:, 32:] & 15) << 4)
        return np.concatenate([_head(d), qs.astype(np.uint8)], axis=1)

    @classmethod
    def unpack(cls, raw):
        d = raw[:, :2].copy().view("<f2").reshape(-1)
        qs = raw[:, 2:]
        return d, np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.uint8)


class Turbo3_0(TurboType):
    """turbo3: 8 levels, 3.25 bits/value."""

    name, bits, type_size = "turbo3_0", 3, 26

    @classmethod
    def pack(cls, d, idx):
        return np.concatenate([_head(d), _pack_3bit(idx)], axis=1)

    @classmethod
    def unpack(cls, raw):
        d = raw[:, :2].copy().view("<f2").reshape(-1)
        return d, _unpack_3bit(raw[:, 2:26])


class Turbo2_0(TurboType):
    """turbo2: 4 levels, 2.25 bits/value (meant for V)."""

    name, bits, type_size = "turbo2_0", 2, 18

    @classmethod
    def pack(cls, d, idx):
        return np.concatenate([_head(d), _pack_2bit(idx)], axis=1)

    @classmethod
    def unpack(cls, raw):
        d = raw[:, :2].copy().view("<f2").reshape(-1)
        return d, _unpack_2bit(raw[:, 2:18])


#: ggml type name -> reference class.
TYPES: dict[str, type[TurboType]] = {t.name: t for t in (Turbo4_0, Turbo3_0, Turbo2_0)}
