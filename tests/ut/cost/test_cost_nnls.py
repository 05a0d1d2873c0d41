"""The cost model's non-negative least squares (numpy) gives scipy's answers: on random problems, badly scaled ones
included, and on the H200 fit of the measured compute terms, every coefficient."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.optimize import nnls as scipy_nnls

from mindspeed_mm.core.fcp.cost import measured_compute
from mindspeed_mm.core.fcp.cost.nnls import nnls


def test_random_problems_match_scipy() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        rows, columns = int(rng.integers(3, 30)), int(rng.integers(1, 10))
        matrix = rng.normal(size=(rows, columns)) * rng.choice([1e-3, 1.0, 1e3], size=columns)
        target = rng.normal(size=rows)
        want, want_residual = scipy_nnls(matrix, target)
        got, residual = nnls(matrix, target)
        assert (got >= 0).all()
        assert residual == pytest.approx(want_residual, rel=1e-9, abs=1e-8)
        if rows >= columns:  # full column rank: the solution is unique
            np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9 * np.abs(want).max())


def _numbers(value: object) -> list[float]:
    if dataclasses.is_dataclass(value):
        return [x for f in dataclasses.fields(value) for x in _numbers(getattr(value, f.name))]
    if isinstance(value, dict):
        return [x for key in sorted(value) for x in _numbers(value[key])]
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in _numbers(item)]
    return [float(value)] if isinstance(value, (int, float)) else []


def test_the_measured_h200_terms_fit_as_with_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, ours = measured_compute.load_h200_qwen3vl8b()
    monkeypatch.setattr(measured_compute, "nnls", scipy_nnls)
    measured_compute.load_h200_qwen3vl8b.cache_clear()
    try:
        _, _, theirs = measured_compute.load_h200_qwen3vl8b()
    finally:
        measured_compute.load_h200_qwen3vl8b.cache_clear()
    assert len(_numbers(ours)) == len(_numbers(theirs)) > 20
    np.testing.assert_allclose(_numbers(ours), _numbers(theirs), rtol=1e-9)
