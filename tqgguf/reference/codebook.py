"""Lloyd–Max codebooks for one coordinate of a uniformly random unit vector.

TurboQuant (Zandieh et al., "TurboQuant: Online Vector Quantization with Near-optimal
Distortion Rate", arXiv 2504.19874, §3.1) quantizes each coordinate of a randomly rotated
unit vector with a scalar quantizer that is optimal for the coordinate's marginal density.
For a uniformly random point on the unit sphere S^(d-1) one coordinate t has the density

    f_d(t) = Γ(d/2) / (√π Γ((d-1)/2)) · (1 - t²)^((d-3)/2),   t ∈ [-1, 1]

(the Beta form of the sphere marginal). tqgguf uses d = 64 (one block, ``QK_TURBO``).
The codebooks here are computed, not copied: Lloyd's algorithm alternates decision
boundaries at the centroid midpoints with centroids at the conditional means, with
Gauss–Legendre quadrature on every cell, until the centroids move less than 1e-15.

These float64 values are the single source of truth; ``scripts/maintain/gen_turbo_tables.py`` rounds
them to float32 and writes ``native/ggml/src/ggml-turbo-tables.h`` for C, CUDA and Metal.
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: Block size of every turbo type (values per block along a row); also the sphere dimension d.
QK_TURBO = 64

#: Number of reconstruction levels per type name.
LEVELS = {"turbo2": 4, "turbo3": 8, "turbo4": 16}


def _log_norm_const(d: int) -> float:
    return math.lgamma(d / 2) - 0.5 * math.log(math.pi) - math.lgamma((d - 1) / 2)


def sphere_marginal_pdf(t: np.ndarray, d: int = QK_TURBO) -> np.ndarray:
    """Density of one coordinate of a uniform random unit vector in R^d.

    Args:
        t: float64 array of points in [-1, 1].
        d: dimension (>= 3).
    Returns:
        float64 array, same shape as ``t``; 0 outside [-1, 1].
    """
    t = np.asarray(t, dtype=np.float64)
    inside = np.abs(t) < 1.0
    out = np.zeros_like(t)
    out[inside] = np.exp(_log_norm_const(d) + (d - 3) / 2 * np.log1p(-t[inside] ** 2))
    return out


def _cell_moments(a: float, b: float, d: int, nodes: np.ndarray, weights: np.ndarray):
    """(mass, first moment, second moment) of the density on [a, b] by Gauss–Legendre."""
    t = 0.5 * (b - a) * nodes + 0.5 * (b + a)
    w = 0.5 * (b - a) * weights * sphere_marginal_pdf(t, d)
    return w.sum(), (w * t).sum(), (w * t * t).sum()


@functools.lru_cache(maxsize=None)
def lloyd_max(levels: int, d: int = QK_TURBO) -> tuple[tuple[float, ...], float]:
    """Lloyd–Max quantizer of the sphere marginal.

    Args:
        levels: number of reconstruction levels (even, >= 2).
        d: sphere dimension.
    Returns:
        (centroids ascending as float64 tuple, expected squared error per coordinate) —
        the error is in units of the coordinate variance 1/d ("relative MSE").
    Raises:
        ValueError: if ``levels`` is not an even number >= 2 or ``d`` < 3.
    """
    if levels < 2 or levels % 2:
        raise ValueError(f"levels must be an even number >= 2, got {levels}")
    if d < 3:
        raise ValueError(f"d must be >= 3, got {d}")
    nodes, weights = np.polynomial.legendre.leggauss(64)
    sigma = 1.0 / math.sqrt(d)
    # start from Gaussian-ish uniform spread over ±2.5σ
    c = np.linspace(-2.5 * sigma, 2.5 * sigma, levels)
    for _ in range(10000):
        bounds = np.concatenate(([-1.0], 0.5 * (c[1:] + c[:-1]), [1.0]))
        new = np.empty_like(c)
        for k in range(levels):
            m0, m1, _ = _cell_moments(bounds[k], bounds[k + 1], d, nodes, weights)
            new[k] = m1 / m0
        new = 0.5 * (new - new[::-1])  # enforce exact symmetry
        moved = np.max(np.abs(new - c))
        c = new
        if moved < 1e-15:
            break
    bounds = np.concatenate(([-1.0], 0.5 * (c[1:] + c[:-1]), [1.0]))
    mse = 0.0
    for k in range(levels):
        m0, m1, m2 = _cell_moments(bounds[k], bounds[k + 1], d, nodes, weights)
        mse += m2 - 2 * c[k] * m1 + c[k] ** 2 * m0
    return tuple(float(x) for x in c), float(mse * d)


def centroids_f32(type_name: str) -> np.ndarray:
    """The float32 centroid table of ``type_name`` ('turbo2'|'turbo3'|'turbo4'), ascending.

    Raises:
        KeyError: unknown type name.
    """
    return np.array(lloyd_max(LEVELS[type_name])[0], dtype=np.float32)


def boundaries_f32(type_name: str) -> np.ndarray:
    """Decision boundaries (midpoints of adjacent centroids, computed in float64, rounded
    to float32), ascending, ``levels - 1`` entries. Index of v = number of boundaries < v."""
    c = np.array(lloyd_max(LEVELS[type_name])[0], dtype=np.float64)
    return (0.5 * (c[1:] + c[:-1])).astype(np.float32)


def expected_relative_mse(type_name: str) -> float:
    """Theoretical per-coordinate MSE of the Lloyd–Max quantizer relative to σ² = 1/64."""
    return lloyd_max(LEVELS[type_name])[1]


@functools.lru_cache(maxsize=None)
def code_step(type_name: str, qmax: int) -> tuple[float, float]:
    """The step of integer codes for a codebook: centroid c_k as q_k = round(c_k / step), |q_k| <= qmax.

    The CUDA decode kernel holds centroids as such codes (7-bit, qmax 63, for the sign-mode lookups
    of docs/CUDA.md "Session 23"). The step minimizes the expected squared error of q_k step against
    c_k, weighted by the mass of each centroid's cell under the sphere marginal: for a fixed rounding
    pattern the best step is the least-squares sum(m c q) / sum(m q^2); the search starts from every
    step that puts the largest centroid on a code in [qmax/2, qmax] (0.001 apart) and iterates round
    -> least squares until the pattern is stable.

    Args:
        type_name: 'turbo2' | 'turbo3' | 'turbo4'.
        qmax: largest code magnitude (>= 1).
    Returns:
        (step as float32-rounded float, expected squared error per coordinate relative to σ² = 1/64).
    Raises:
        KeyError: unknown type name.
        ValueError: qmax < 1.
    """
    if qmax < 1:
        raise ValueError(f"qmax must be >= 1, got {qmax}")
    levels = LEVELS[type_name]
    c = np.array(lloyd_max(levels)[0], dtype=np.float64)
    nodes, weights = np.polynomial.legendre.leggauss(64)
    bounds = np.concatenate(([-1.0], 0.5 * (c[1:] + c[:-1]), [1.0]))
    mass = np.array([_cell_moments(bounds[k], bounds[k + 1], QK_TURBO, nodes, weights)[0] for k in range(levels)])
    best = (math.inf, 0.0)
    for top in np.arange(qmax + 0.4999, qmax / 2, -0.001):
        step = c[-1] / top
        for _ in range(20):
            q = np.round(c / step)
            if np.max(np.abs(q)) > qmax:
                break
            err = float(np.sum(mass * (q * step - c) ** 2))
            best = min(best, (err, float(np.float32(step))))
            ls = float(np.sum(mass * c * q) / np.sum(mass * q * q))
            if ls == step:
                break
            step = ls
    step = best[1]
    q = np.round(c / step)
    return step, float(np.sum(mass * (q * step - c) ** 2) * QK_TURBO)
