"""Monotone one-dimensional grids (x -> y) with piecewise-linear interpolation and extrapolation."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

GRID_SCALES = ("linear", "loglog")


@dataclass(frozen=True)
class Grid:
    """A measured or derived curve y(x), monotone non-decreasing in x.

    Between points the curve is piecewise linear, either in (x, y) (`linear`, right for
    latency + bytes / bandwidth curves) or in (log x, log y) (`loglog`, right for power laws such
    as quadratic attention). Outside the points the first / last segment is extended, so the
    extrapolation keeps the local slope (linear) or the local exponent (loglog), over a million
    times the grid's range (in the interpolation space); a linear curve stops at 0 downwards.
    """

    x: tuple[float, ...]
    """Abscissae, strictly increasing, > 0 (tokens for attention grids, bytes for comm grids)."""
    y: tuple[float, ...]
    """Ordinates (milliseconds), non-decreasing, >= 0 (> 0 for `loglog`)."""
    scale: str = "linear"
    """Interpolation space: one of GRID_SCALES."""

    def __post_init__(self) -> None:
        xs = np.asarray(self.x, dtype=np.float64)
        ys = np.asarray(self.y, dtype=np.float64)
        if self.scale == "loglog":
            xs, ys = np.log(xs), np.log(ys)
        # Extrapolation as two far sentinel points, so one np.interp call evaluates everything.
        lo_slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        hi_slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        span = max(abs(xs[-1]), abs(xs[0]), 1.0) * 1e6
        x_lo, x_hi = xs[0] - span, xs[-1] + span
        pts_x = [x_lo, *xs, x_hi]
        pts_y = [ys[0] - span * lo_slope, *ys, ys[-1] + span * hi_slope]
        if self.scale == "linear":
            # Times cannot go negative: stop the downward extension where it reaches 0.
            pts_x, pts_y = _clip_at_zero(pts_x, pts_y, lo_slope)
        object.__setattr__(self, "_px", np.asarray(pts_x))
        object.__setattr__(self, "_py", np.asarray(pts_y))

    def __call__(self, x: Any) -> np.ndarray | float:
        """Evaluate at `x` (scalar or ndarray); scalars give a float."""
        if self.scale == "loglog":
            with np.errstate(divide="ignore"):
                out = np.exp(np.interp(np.log(x), self._px, self._py))  # type: ignore[attr-defined]
        else:
            out = np.interp(x, self._px, self._py)  # type: ignore[attr-defined]
        return float(out) if np.ndim(out) == 0 else out

    def affine(self) -> tuple[float, float] | None:
        """(intercept, slope) when this is a `linear` grid lying on one straight line, else None."""
        if self.scale != "linear":
            return None
        xs = np.asarray(self.x)
        ys = np.asarray(self.y)
        slope = (ys[-1] - ys[0]) / (xs[-1] - xs[0])
        intercept = ys[0] - slope * xs[0]
        if intercept < 0 or not np.allclose(intercept + slope * xs, ys, rtol=1e-9, atol=0.0):
            return None
        return float(intercept), float(slope)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: {"x": [...], "y": [...], "scale": ...}."""
        return {"x": list(self.x), "y": list(self.y), "scale": self.scale}


def _clip_at_zero(xs: list[float], ys: list[float], lo_slope: float) -> tuple[list[float], list[float]]:
    """Replace a negative low sentinel by the point where the first segment reaches 0."""
    if ys[0] >= 0:
        return xs, ys
    x_zero = xs[1] - ys[1] / lo_slope
    return [xs[0], x_zero, *xs[1:]], [0.0, 0.0, *ys[1:]]


def fit_quadratic(grid: Grid) -> tuple[float, float, float]:
    """Non-negative (alpha, beta, gamma) of y = alpha x^2 + beta x + gamma fitted to a grid.

    Least squares in relative error (every point weighs the same whatever its magnitude); the
    non-negativity constraint is solved exactly by trying every subset of free coefficients.
    """
    x = np.asarray(grid.x, dtype=np.float64)
    y = np.asarray(grid.y, dtype=np.float64)
    design = np.stack([x * x, x, np.ones_like(x)], axis=1) / y[:, None]
    target = np.ones_like(x)
    best_err, best = np.inf, np.zeros(3)
    for subset in range(1, 8):
        cols = [i for i in range(3) if subset >> i & 1]
        coef, *_ = np.linalg.lstsq(design[:, cols], target, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(3)
        full[cols] = coef
        err = float(np.sum((design @ full - target) ** 2))
        if err < best_err:
            best_err, best = err, full
    return float(best[0]), float(best[1]), float(best[2])
