"""Stage 1 packing (best-fit decreasing), merging, and round formation."""
import numpy as np
import pytest

from mindspeed_mm.core.fcp.solver.packing import AtomicGroup, best_fit_decreasing, merge_smallest, min_degree_for
from mindspeed_mm.core.fcp.solver.rounds import min_rounds, round_counts, spread_over_rounds


def test_min_degree_for():
    assert [min_degree_for(t, 100) for t in (1, 100, 101, 250)] == [1, 1, 2, 3]


def test_best_fit_picks_the_tightest_group():
    lengths = [70, 60, 30, 35, 5]
    # 70 opens A (spare 30), 60 opens B (spare 40), 35 -> B (tightest that fits: 40), 30 -> A (30),
    # 5 -> B (spare 5).
    groups = best_fit_decreasing(range(5), lengths, 100)
    assert [g.samples for g in groups] == [(0, 2), (1, 3, 4)]
    assert [g.tokens for g in groups] == [100, 100]
    assert [g.min_degree for g in groups] == [1, 1]


def test_long_sample_opens_a_group_of_its_minimum_degree():
    groups = best_fit_decreasing([0, 1, 2], [250, 40, 60], 100)
    # 250 opens a degree-3 group (spare 50); 60 does not fit and opens a group (spare 40); 40 fits
    # both and goes to the tighter one.
    assert groups == [AtomicGroup((0,), 250, 3), AtomicGroup((1, 2), 100, 1)]


def test_best_fit_is_deterministic_and_covers_every_sample():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 300, size=200).tolist()
    groups = best_fit_decreasing(range(200), lengths, 256)
    assert sorted(s for g in groups for s in g.samples) == list(range(200))
    assert all(g.tokens <= g.min_degree * 256 for g in groups)
    assert groups == best_fit_decreasing(list(reversed(range(200))), lengths, 256)


def test_merge_smallest_until_groups_fit_the_ranks():
    groups = [AtomicGroup((i,), 60, 1) for i in range(3)]
    merged = merge_smallest(groups, 2, 2, 100)
    # three one-rank groups on two ranks: 60 + 60 needs 2 ranks, so everything merges into one group.
    assert merged == [AtomicGroup((0, 1, 2), 180, 2)]
    assert merge_smallest(groups, 3, 3, 100) == groups
    assert merge_smallest(groups, 2, 1, 100) is None


def test_min_rounds_and_round_counts():
    assert min_rounds([100] * 10, 4, 100) == 3
    assert round_counts([100] * 10, 4, 100, None, 2) == [3, 4, 5]
    assert round_counts([100] * 4, 4, 100, None, 5) == [1, 2, 3, 4]
    assert round_counts([100] * 10, 4, 100, 3, 2) == [3]
    with pytest.raises(ValueError, match=r"the 2 rounds allowed by SolverConfig.max_rounds \(a Python API.*\) are too few"):
        round_counts([100] * 10, 4, 100, 2, 2)


def test_spread_is_longest_first_to_the_least_loaded_round():
    device = [9.0, 7.0, 5.0, 4.0, 2.0]
    lengths = [10] * 5
    # loads after each step: (9, 0), (9, 7), (9, 12), (13, 12), (13, 14)
    assert spread_over_rounds(device, lengths, 2, 1000) == [[0, 3], [1, 2, 4]]


def test_spread_respects_round_memory():
    device = [9.0, 1.0, 1.0]
    lengths = [90, 20, 20]
    # round 0 holds 90 tokens of 100: the short samples cannot join it.
    assert spread_over_rounds(device, lengths, 2, 100) == [[0], [1, 2]]
    assert spread_over_rounds(device, [90, 95, 20], 2, 100) is None
