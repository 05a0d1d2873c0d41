"""The degree window of a round's split widens while a group that sets the makespan could still run
faster on more ranks, also when the best algo's curve is not monotone (ring and Ulysses mixed)."""
import numpy as np
from round_solvers import lean_round_solver

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.round_types import at_window_edge
from scenario_costs import a3_scenario

RING, ULYSSES = 0, 1
INF = np.inf


def _edge(times, algos, makespan, mins=(4,), top=1024):
    return at_window_edge(np.array(times, dtype=float), np.array(algos), makespan, np.array(mins), top)


def test_a_group_still_getting_faster_at_the_window_end_widens_it():
    # Ring only, best at the last degree.
    assert _edge([[9.0, 8.0, 7.0]], [[RING] * 3], 7.0)
    # Ulysses best inside the window, but the ring is still falling at its end: more ranks may help.
    assert _edge([[11.0, 9.0, 9.8]], [[RING, ULYSSES, RING]], 9.0)
    # Ulysses only: unsupported degrees are inf; its time fell from its previous degree to its last.
    assert _edge([[12.0, INF, INF, INF, 8.0, INF]], [[ULYSSES] * 6], 8.0)


def test_a_saturated_curve_a_window_at_the_top_degree_or_a_fast_group_keep_it():
    # The ring rose from its previous best degree to the last one.
    assert not _edge([[11.0, 9.0, 9.0, 9.5]], [[RING, ULYSSES, RING, RING]], 9.0)
    # The window already ends at the top degree.
    assert not _edge([[9.0, 8.0, 7.0]], [[RING] * 3], 7.0, mins=(6,), top=8)
    # The falling group does not set the makespan; the one that does is flat.
    assert not _edge([[9.0, 8.0, 7.0], [10.0, 10.2, 10.5]], [[RING] * 3, [RING] * 3], 10.0, mins=(4, 4))


def test_with_both_algos_a_grouping_splits_at_least_as_fast_as_with_the_ring_alone():
    # Every (group, degree) is at least as fast with both algos, so the optimal split is too, once the
    # window reaches the degrees the slowest groups need: 3 long videos, each alone, among 64 groups on
    # 256 ranks. Doubled once, their window runs from the minimum of 4 to 35 ranks and holds Ulysses 32,
    # faster than every ring inside it, while the ring still gets faster up to 64 ranks (a window that
    # stopped there split at 4,982 ms against the ring's 3,925).
    both = a3_scenario(shard_ranks=256)
    ring = CostModel(both.table, algos=("ring",))
    rng = np.random.default_rng(3)
    lengths = [115_000, 110_000, 100_000] + rng.integers(600, 1_300, size=256).tolist()
    patches = [4 * n for n in lengths]
    members = np.arange(len(lengths))
    owners = np.concatenate([[0, 1, 2], 3 + np.arange(256) % 61])
    starts = [lean_round_solver(cost, lengths, patches, 256, 4).evaluated(members, owners, 64) for cost in (both, ring)]
    assert starts[0].makespan <= starts[1].makespan < 4_000
