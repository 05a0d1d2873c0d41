"""Fits and timing helpers of the profiler: monotone grids, affine fits, statistics, repeated timing."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from mindspeed_mm.core.fcp.profiler.fitting import fit_line, median_of, monotone
from mindspeed_mm.core.fcp.profiler.timing import summarize, time_repeats


def test_monotone_pools_adjacent_violators() -> None:
    assert monotone([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert monotone([5.0, 1.0, 0.0]) == [2.0, 2.0, 2.0]
    already = [0.5, 0.5, 1.0, 7.0]
    assert monotone(already) == already


def test_monotone_is_the_least_squares_non_decreasing_fit() -> None:
    rng = np.random.default_rng(0)
    values = (np.arange(12) + rng.normal(0, 3, 12)).tolist()
    fitted = np.asarray(monotone(values))
    assert np.all(np.diff(fitted) >= 0)
    # Block means keep the total (PAVA property) and no monotone perturbation does better.
    assert fitted.sum() == pytest.approx(sum(values))
    error = np.sum((fitted - values) ** 2)
    for shift in (-0.1, 0.1):
        other = np.maximum.accumulate(fitted + shift * np.linspace(-1, 1, 12))
        assert error <= np.sum((other - values) ** 2) + 1e-12


def test_fit_line_recovers_an_affine_curve_and_stays_non_negative() -> None:
    xs = [64, 256, 1024, 4096]
    assert fit_line(xs, [2.0 + 0.01 * x for x in xs]) == pytest.approx((2.0, 0.01))
    intercept, slope = fit_line(xs, [0.01 * x - 0.3 for x in xs])
    assert intercept == 0.0 and slope > 0
    intercept, slope = fit_line([1, 2, 3], [5.0, 4.0, 3.0])
    assert slope == 0.0 and 3.0 < intercept < 5.0
    with pytest.raises(ValueError, match="positive y"):
        fit_line([1, 2], [1.0, 0.0])


def test_statistics() -> None:
    values = [4.0, 1.0, 3.0, 2.0, 100.0]
    assert summarize(values, "median") == 3.0
    assert summarize(values, "min") == 1.0
    assert summarize(values, "lower_quartile") == 2.0
    assert median_of([3.0, 1.0]) == 2.0
    with pytest.raises(ValueError, match="statistic must be one of"):
        summarize(values, "mean")
    with pytest.raises(ValueError, match="empty"):
        summarize([], "median")


def test_time_repeats_counts_runs_and_reads_the_chosen_clock() -> None:
    calls = []

    def sleep() -> None:
        calls.append(1)
        time.sleep(0.002)

    samples = time_repeats(sleep, warmup=2, repeats=3, device=torch.device("cpu"), clock="wall")
    assert len(samples.times_ms) == 3 and len(calls) == 5
    assert all(t >= 2.0 for t in samples.times_ms)
    # Sleeping costs no CPU time: the cpu clock reads far less than the 2 ms slept.
    cpu = time_repeats(sleep, warmup=0, repeats=3, device=torch.device("cpu"), clock="cpu")
    assert all(t < 1.5 for t in cpu.times_ms)


def test_min_sample_ms_repeats_short_work_inside_a_sample() -> None:
    calls = []

    def short() -> None:
        calls.append(1)
        time.sleep(0.001)

    samples = time_repeats(short, warmup=0, repeats=2, device=torch.device("cpu"), min_sample_ms=10.0, clock="wall")
    # One sizing run, then at least ~10 runs per sample; the result is per run.
    assert len(calls) >= 1 + 2 * 5
    assert all(1.0 <= t < 10.0 for t in samples.times_ms)  # per run, not the >= 10 ms sample total
