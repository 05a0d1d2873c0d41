"""Fits and timing helpers of the profiler: monotone grids, affine fits, statistics, repeated timing."""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
import torch

from mindspeed_mm.core.fcp.profiler.fitting import fit_line, fit_overlapped, median_of, monotone
from mindspeed_mm.core.fcp.profiler.timing import CLOCKS, summarize, time_repeats


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


@pytest.mark.parametrize(("traffic", "overlap"), [(30.0, 0.0), (30.0, 0.6), (12.0, 1.0)])
def test_fit_overlapped_recovers_the_traffic_and_the_share_hidden(traffic: float, overlap: float) -> None:
    passes = [2.0, 5.0, 15.0, 60.0]
    rounds = [max(p, traffic) + (1 - overlap) * min(p, traffic) for p in passes]
    fitted, hidden = fit_overlapped(passes, rounds)
    assert fitted == pytest.approx(traffic, rel=0.005) and hidden == pytest.approx(overlap, abs=0.011)


def test_fit_overlapped_prefers_hidden_traffic_where_the_data_cannot_tell() -> None:
    # Rounds as long as their passes: no traffic shows, whatever the overlap; the tie goes to 1.
    traffic, overlap = fit_overlapped([2.0, 5.0, 15.0], [2.0, 5.0, 15.0])
    assert overlap == 1.0 and traffic <= 2.0
    with pytest.raises(ValueError, match="at least two"):
        fit_overlapped([1.0], [2.0])
    with pytest.raises(ValueError, match="positive times"):
        fit_overlapped([1.0, 0.0], [2.0, 3.0])


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


class _FakeClocks:
    """A wall and a CPU clock that advance only when the timed work runs (seconds)."""

    def __init__(self, wall_s_per_call: float, cpu_s_per_call: float) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.calls = 0
        self.per_call = (wall_s_per_call, cpu_s_per_call)

    def work(self) -> None:
        self.calls += 1
        self.wall += self.per_call[0]
        self.cpu += self.per_call[1]

    def clocks(self) -> dict[str, Callable[[], float]]:
        return {"wall": lambda: self.wall, "cpu": lambda: self.cpu}


def test_time_repeats_counts_runs_and_reads_the_chosen_clock() -> None:
    # Work that waits (2 ms elapsed) but computes little (0.25 ms of CPU time).
    fake = _FakeClocks(0.002, 0.00025)
    device = torch.device("cpu")
    samples = time_repeats(fake.work, warmup=2, repeats=3, device=device, clock="wall", clocks=fake.clocks())
    assert fake.calls == 5
    assert samples.times_ms == pytest.approx((2.0, 2.0, 2.0))
    cpu = time_repeats(fake.work, warmup=0, repeats=3, device=device, clock="cpu", clocks=fake.clocks())
    assert cpu.times_ms == pytest.approx((0.25, 0.25, 0.25))
    assert CLOCKS["wall"] is time.perf_counter and CLOCKS["cpu"] is time.process_time


def test_min_sample_ms_repeats_short_work_inside_a_sample() -> None:
    fake = _FakeClocks(0.001, 0.001)
    samples = time_repeats(fake.work, warmup=0, repeats=2, device=torch.device("cpu"), min_sample_ms=10.0,
                           clock="wall", clocks=fake.clocks())
    # One sizing run of 1 ms, then 10 runs per 10 ms sample; the result is per run.
    assert fake.calls == 1 + 2 * 10
    assert samples.times_ms == pytest.approx((1.0, 1.0))  # per run, not the 10 ms sample total


def test_min_sample_ms_is_sized_on_elapsed_time_whatever_the_clock() -> None:
    # 4 ms elapsed but 0.5 ms CPU per run: the cpu clock would ask for 20 runs, elapsed time for 3.
    fake = _FakeClocks(0.004, 0.0005)
    samples = time_repeats(fake.work, warmup=0, repeats=1, device=torch.device("cpu"), min_sample_ms=10.0,
                           clock="cpu", clocks=fake.clocks())
    assert fake.calls == 1 + 3
    assert samples.times_ms == pytest.approx((0.5,))
