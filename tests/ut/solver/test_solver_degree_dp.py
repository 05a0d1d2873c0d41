"""Stage 2 degree assignment: hand-made cases, brute force, and the two exact solvers against each other."""
import itertools

import numpy as np
import pytest

from mindspeed_mm.core.fcp.solver.degree_dp import (assign_degrees, beats, dp_makespan, optimal_makespan, realise,
                                                    threshold_makespan)

INF = np.inf


def _brute(times: np.ndarray, spare: int) -> float:
    best = INF
    for extra in itertools.product(range(spare + 1), repeat=times.shape[0]):
        if sum(extra) == spare:
            padded = [times[k, s] if s < times.shape[1] else INF for k, s in enumerate(extra)]
            best = min(best, max(padded))
    return best


def _check_choice(times, spare, expected):
    choice = assign_degrees(times, spare)
    assert choice is not None
    assert choice.makespan == pytest.approx(expected)
    assert int(choice.extra.sum()) == spare and choice.extra.min() >= 0
    assert max(times[k, s] for k, s in enumerate(choice.extra)) == pytest.approx(expected)
    return choice.extra


def test_one_group_takes_all_spare_ranks():
    times = np.array([[10.0, 6.0, 4.0, 3.5]])
    assert list(_check_choice(times, 3, 3.5)) == [3]


def test_spare_ranks_go_to_the_slow_group():
    # Group 0 halves with every rank, group 1 is short and gets slower with more ranks.
    times = np.array([[40.0, 20.0, 13.0, 10.0], [5.0, 6.0, 7.0, 8.0]])
    # 3 spare ranks: (3, 0) -> max(10, 5) = 10 is optimal.
    assert list(_check_choice(times, 3, 10.0)) == [3, 0]


def test_non_monotone_curve_forces_spare_on_the_cheapest_group():
    # Every extra rank hurts both groups; the optimum puts it where it hurts least.
    times = np.array([[10.0, 11.0], [9.0, 12.0]])
    assert list(_check_choice(times, 1, 11.0)) == [1, 0]


def test_gap_in_allowed_degrees():
    # Group 0 can run on +0 or +2 extra ranks only (e.g. head divisibility); 2 spare ranks.
    times = np.array([[30.0, INF, 12.0], [20.0, 11.0, 9.0]])
    assert _brute(times, 2) == 20.0
    _check_choice(times, 2, 20.0)
    times = np.array([[30.0, INF, 12.0], [10.0, 11.0, 9.0]])
    assert list(_check_choice(times, 2, 12.0)) == [2, 0]


def test_infeasible_split_returns_none():
    times = np.array([[5.0, INF, INF], [5.0, INF, INF]])
    assert assign_degrees(times, 1) is None
    assert dp_makespan(times, 1) == INF
    assert threshold_makespan(times, 1) == INF
    assert assign_degrees(times, -1) is None


def test_all_solvers_match_brute_force_on_random_instances():
    rng = np.random.default_rng(7)
    for _ in range(1500):
        k = int(rng.integers(1, 5))
        spare = int(rng.integers(0, 7))
        times = rng.random((k, spare + 1 + int(rng.integers(0, 3)))) * 10
        times[rng.random(times.shape) < 0.25] = INF
        if rng.random() < 0.5:
            times = np.round(times)  # ties
        expected = _brute(times[:, : spare + 1], spare)
        assert dp_makespan(times, spare) == expected
        assert threshold_makespan(times, spare) == expected
        assert optimal_makespan(times, spare) == expected
        for tau in (expected, expected * 0.999, expected * 1.001):
            assert beats(times, spare, tau) == (tau >= expected)
        if np.isfinite(expected):
            extra = realise(times, spare, expected)
            assert int(extra.sum()) == spare
            assert max(times[j, s] for j, s in enumerate(extra)) <= expected


def test_threshold_search_matches_dp_on_larger_curves():
    rng = np.random.default_rng(3)
    for _ in range(40):
        k = int(rng.integers(5, 40))
        spare = int(rng.integers(0, 60))
        work = rng.uniform(50, 500, size=(k, 1))
        first = rng.integers(1, 4, size=(k, 1))
        degree = first + np.arange(spare + 1)[None, :]
        # compute / degree + a communication term growing with the degree, some degrees forbidden
        times = work / degree + rng.uniform(0.5, 3.0, size=(k, 1)) * degree
        times[(degree % 5 == 0) & (rng.random(times.shape) < 0.5)] = INF
        assert threshold_makespan(times, spare) == dp_makespan(times, spare)


def test_threshold_search_is_fast_for_a_thousand_ranks():
    rng = np.random.default_rng(0)
    k, spare = 700, 324
    work = rng.uniform(100, 900, size=(k, 1))
    degree = 1 + np.arange(spare + 1)[None, :]
    times = work / degree + 0.05 * degree
    times[:, 1::7] *= 1.3  # a bumpy curve: allowed degrees are not intervals
    choice = assign_degrees(times, spare)
    assert choice is not None and int(choice.extra.sum()) == spare
    assert max(times[j, s] for j, s in enumerate(choice.extra)) == choice.makespan


def test_narrow_matrices_stand_for_inf_in_the_missing_columns():
    rng = np.random.default_rng(12)
    for _ in range(800):
        k = int(rng.integers(1, 6))
        spare = int(rng.integers(0, 9))
        width = int(rng.integers(1, spare + 2))
        times = rng.random((k, width)) * 10
        times[rng.random(times.shape) < 0.2] = INF
        if rng.random() < 0.5:
            times = np.round(times)
        padded = np.concatenate([times, np.full((k, spare + 1 - width), INF)], axis=1)
        expected = _brute(padded, spare)
        assert dp_makespan(times, spare) == expected
        assert threshold_makespan(times, spare) == expected
        assert optimal_makespan(times, spare) == expected
        if np.isfinite(expected):
            for tau in (expected, expected * 0.999, expected * 1.001):
                assert beats(times, spare, tau) == (tau >= expected)
            extra = realise(times, spare, expected)
            assert int(extra.sum()) == spare and int(extra.max()) < width
            assert max(times[j, s] for j, s in enumerate(extra)) <= expected
