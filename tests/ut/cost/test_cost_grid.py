"""Grids: piecewise-linear (linear / log-log) interpolation, extrapolation, affine detection, quadratic fit."""
from __future__ import annotations

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost.grid import Grid, fit_quadratic


def test_linear_grid_interpolates_between_points() -> None:
    grid = Grid((1.0, 2.0, 4.0), (1.0, 3.0, 4.0), "linear")
    np.testing.assert_allclose(grid(np.array([1.0, 1.5, 2.0, 3.0, 4.0])), [1.0, 2.0, 3.0, 3.5, 4.0])


def test_linear_grid_extends_end_slopes_and_stops_at_zero() -> None:
    grid = Grid((10.0, 20.0, 30.0), (5.0, 6.0, 8.0), "linear")
    # Above: slope of the last segment (0.2 per unit).
    assert grid(130.0) == pytest.approx(8.0 + 100 * 0.2)
    # Below: slope of the first segment (0.1 per unit), down to 0 and no further.
    assert grid(0.0) == pytest.approx(4.0)
    assert grid(-30.0) == pytest.approx(1.0)
    assert grid(-100.0) == 0.0
    assert grid(-1e9) == 0.0


def test_loglog_grid_keeps_power_laws_inside_and_outside() -> None:
    xs = (64.0, 256.0, 1024.0, 4096.0)
    grid = Grid(xs, tuple(3e-6 * x * x for x in xs), "loglog")
    probe = np.array([1.0, 100.0, 700.0, 4096.0, 1e6])
    np.testing.assert_allclose(grid(probe), 3e-6 * probe**2, rtol=1e-9)


def test_interpolation_is_monotone() -> None:
    grid = Grid((1.0, 10.0, 100.0, 1000.0), (0.5, 0.5, 2.0, 30.0), "loglog")
    values = grid(np.geomspace(0.01, 1e6, 500))
    assert np.all(np.diff(values) >= 0)
    lin = Grid((1.0, 10.0, 100.0), (0.0, 1.0, 1.0), "linear")
    assert np.all(np.diff(lin(np.linspace(-50, 500, 500))) >= 0)


def test_scalar_in_float_out_array_in_array_out() -> None:
    grid = Grid((1.0, 2.0), (1.0, 2.0))
    assert isinstance(grid(1.5), float)
    assert isinstance(grid(np.array([1.5])), np.ndarray)


def test_affine_detection() -> None:
    assert Grid((1.0, 2.0, 8.0), (0.3, 0.5, 1.7)).affine() == pytest.approx((0.1, 0.2))
    assert Grid((1.0, 2.0, 8.0), (0.3, 0.5, 1.8)).affine() is None
    assert Grid((1.0, 2.0, 8.0), (0.3, 0.5, 1.7), "loglog").affine() is None


def test_fit_quadratic_recovers_exact_coefficients() -> None:
    xs = tuple(float(2**k) for k in range(4, 16))
    grid = Grid(xs, tuple(2e-7 * x * x + 3e-4 * x + 0.05 for x in xs), "loglog")
    alpha, beta, gamma = fit_quadratic(grid)
    assert alpha == pytest.approx(2e-7, rel=1e-6)
    assert beta == pytest.approx(3e-4, rel=1e-6)
    assert gamma == pytest.approx(0.05, rel=1e-6)


def test_fit_quadratic_keeps_coefficients_non_negative() -> None:
    # A pure power 1.5 law would want a negative intercept from an unconstrained fit.
    xs = tuple(float(2**k) for k in range(2, 14))
    fit = fit_quadratic(Grid(xs, tuple(x**1.5 for x in xs), "loglog"))
    assert min(fit) >= 0.0
    assert fit[0] > 0 or fit[1] > 0
