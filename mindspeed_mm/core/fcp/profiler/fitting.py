"""Small fits that turn noisy measurements into table figures."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def monotone(values: Sequence[float]) -> list[float]:
    """Closest non-decreasing sequence in least squares (pool adjacent violators).

    Timing noise can make a larger message or a longer document look faster than a smaller one;
    the table's grids must be monotone, so violating neighbours are replaced by their mean.
    """
    blocks: list[list[float]] = []   # [sum, count] per pooled block
    for value in values:
        blocks.append([float(value), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out.extend([total / count] * int(count))
    return out


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) >= 0 of y = a + b x, least squares in relative error.

    Relative error gives small and large points the same weight, so the intercept (a fixed cost)
    is not drowned by the largest points.
    """
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if x.size < 2 or x.size != y.size:
        raise ValueError(f"fit_line needs at least two (x, y) pairs of equal count, got {x.size} and {y.size}")
    if np.any(y <= 0):
        raise ValueError(f"fit_line needs positive y values, got {y.tolist()}")
    design = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    (intercept, slope), *_ = np.linalg.lstsq(design, np.ones_like(x), rcond=None)
    if intercept < 0:
        intercept = 0.0
        slope = float(np.sum(x / y) / np.sum((x / y) ** 2))
    if slope < 0:
        slope = 0.0
        intercept = float(np.sum(1 / y) / np.sum((1 / y) ** 2))
    return float(intercept), float(slope)


def median_of(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    if not values:
        raise ValueError("median of an empty sequence")
    return float(np.median(np.asarray(values, dtype=np.float64)))


def fit_overlapped(pass_ms: Sequence[float], round_ms: Sequence[float],
                   overlaps: int = 101, traffic_points: int = 2000) -> tuple[float, float]:
    """(traffic t >= 0, overlap w in [0, 1]) of round = max(pass, t) + (1 - w) min(pass, t), least squares
    in relative error over a grid (w in steps of 1 / (overlaps - 1), t geometric from 1e-3 x the
    shortest round to the longest). Ties go to the larger overlap: where the data cannot tell the
    two apart, the traffic stays hidden as FSDP2's prefetching intends."""
    p = np.asarray(pass_ms, dtype=np.float64)
    f = np.asarray(round_ms, dtype=np.float64)
    if p.size < 2 or p.size != f.size:
        raise ValueError(f"fit_overlapped needs at least two (pass, round) pairs of equal count, got {p.size} and "
                         f"{f.size}")
    if np.any(p <= 0) or np.any(f <= 0):
        raise ValueError(f"fit_overlapped needs positive times, got {p.tolist()} and {f.tolist()}")
    w = np.linspace(1.0, 0.0, overlaps)[:, None, None]
    t = np.geomspace(1e-3 * f.min(), f.max(), traffic_points)[None, :, None]
    predicted = np.maximum(p, t) + (1.0 - w) * np.minimum(p, t)
    error = np.sum((predicted / f - 1.0) ** 2, axis=2)
    best_w, best_t = np.unravel_index(int(np.argmin(error)), error.shape)
    return float(t[0, best_t, 0]), float(w[best_w, 0, 0])
