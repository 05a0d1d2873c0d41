"""The planner's batched cost queries give what the one-at-a-time queries they replace give."""
import itertools

import numpy as np
import pytest
from round_solvers import lean_round_solver

from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns
from mindspeed_mm.core.fcp.simulate.workloads import generate_samples
from mindspeed_mm.core.fcp.solver.group_times import SampleWorkloads
from mindspeed_mm.core.fcp.solver.node_repair import aligned_degrees
from mindspeed_mm.core.fcp.solver.placement import _exact_packing, _large_items_have_hosts
from scenario_costs import a3_scenario

A3_8B = a3_scenario(shard_ranks=64)


def _solver(lengths, patches, num_ranks=64):
    return lean_round_solver(A3_8B, lengths, patches, num_ranks, 8)


def test_groupings_evaluated_together_equal_each_evaluated_alone():
    batch = generate_samples("internvid", 300, seed=5)
    solver = _solver(batch.lengths.tolist(), batch.vision_patches.tolist())
    rng = np.random.default_rng(0)
    for trial in range(6):
        groupings = []
        for _ in range(int(rng.integers(2, 5))):
            members = rng.permutation(300)[: int(rng.integers(20, 120))]
            count = int(rng.integers(1, min(40, members.size)))
            # Group ids 0 .. count - 1, every one used.
            owners = np.concatenate([np.arange(count), rng.integers(0, count, members.size - count)])
            groupings.append((members, owners, count))
        # The whole batch in one group: more tokens than the 64 ranks hold.
        groupings.insert(int(rng.integers(0, len(groupings) + 1)), (np.arange(300), np.zeros(300, dtype=np.int64), 1))
        together = solver.evaluated_together(groupings)
        for grouping, start in zip(groupings, together):
            alone = solver.evaluated(*grouping)
            assert (start is None) == (alone is None)
            if alone is not None:
                assert start.makespan == alone.makespan and start.window == alone.window
                np.testing.assert_array_equal(start.times, alone.times)
                np.testing.assert_array_equal(start.algos, alone.algos)
                np.testing.assert_array_equal(start.min_degrees, alone.min_degrees)


def test_ulysses_on_the_degrees_asked_equals_every_supported_degree_gathered():
    batch = generate_samples("openvid", 40, seed=2)
    columns = SampleWorkloads(A3_8B, batch.lengths.tolist(), batch.vision_patches.tolist()).columns
    ulysses = A3_8B._ulysses
    every = ulysses.times(columns, np.tile(ulysses.degrees, (len(columns), 1)))   # every supported degree
    rng = np.random.default_rng(1)
    for width in (1, 3, 9):
        degrees = rng.integers(1, 40, size=(len(columns), width))
        got = ulysses.times(columns, degrees)
        for k, row in enumerate(degrees.tolist()):
            for s, d in enumerate(row):
                expected = every[k, list(ulysses.degrees).index(d)] if ulysses.supported(d) else np.inf
                assert got[k, s] == expected


def test_placed_time_table_is_the_fastest_algo_of_each_placed_group():
    rng = np.random.default_rng(3)
    workloads = [A3_8B.workload(rng.integers(200, 30_000, size=int(rng.integers(1, 6))).tolist()) for _ in range(30)]
    degrees = rng.integers(2, 17, size=30).tolist()
    parts = [int(rng.integers(1, min(d, 8) + 1)) for d in degrees]
    times, algos = A3_8B.best_placed_time_table(workloads, degrees, parts)
    for w, d, p, t, a in zip(workloads, degrees, parts, times.tolist(), algos):
        each = [float(A3_8B.group_time_ms(w, d, algo, node_part=p)) for algo in A3_8B.algos]
        assert t == min(each) and a == A3_8B.algos[each.index(min(each))]
    columns = WorkloadColumns.stack(workloads)
    np.testing.assert_array_equal(A3_8B.best_placed_time_table(columns, degrees, parts)[0], times)
    with pytest.raises(ValueError, match="30 workloads, 29 degrees"):
        A3_8B.best_placed_time_table(workloads, degrees[:-1], parts)


def _aligned_by_resorting(cost, workloads, min_degrees, num_ranks, top_degree):
    """The node repair's rule written plainly: re-sort every group before each doubling."""
    degrees = [1 << max(0, int(m) - 1).bit_length() for m in min_degrees]
    if sum(degrees) > num_ranks or max(degrees) > top_degree:
        return None

    def best(k):
        times, index = cost.best_time_ms(workloads[k], np.array([degrees[k]]))
        return float(times[0]), cost.algos[int(index[0])]

    chosen = [best(k) for k in range(len(degrees))]
    free = num_ranks - sum(degrees)
    while free:
        order = sorted(range(len(degrees)), key=lambda k: (-chosen[k][0], degrees[k], k))
        k = next((k for k in order if degrees[k] <= free and 2 * degrees[k] <= top_degree), None)
        if k is None:
            return None
        free -= degrees[k]
        degrees[k] *= 2
        chosen[k] = best(k)
    if not all(np.isfinite(t) for t, _ in chosen):
        return None
    return degrees, [t for t, _ in chosen], [a for _, a in chosen]


def test_node_repair_doubles_the_groups_the_plain_rule_doubles():
    rng = np.random.default_rng(4)
    found = 0
    for trial in range(40):
        groups = int(rng.integers(2, 30))
        workloads = [A3_8B.workload(rng.integers(200, 60_000, size=int(rng.integers(1, 4))).tolist())
                     for _ in range(groups)]
        mins = [A3_8B.min_degree(w.total_tokens) for w in workloads]
        num_ranks = int(rng.choice([16, 32, 64]))
        expected = _aligned_by_resorting(A3_8B, workloads, mins, num_ranks, num_ranks)
        assert aligned_degrees(A3_8B, workloads, mins, num_ranks, num_ranks, 8) == expected
        found += expected is not None
    assert found >= 10


def _has_exact_packing(sizes, capacities):
    for bins in itertools.product(range(len(capacities)), repeat=len(sizes)):
        filled = [0] * len(capacities)
        for size, b in zip(sizes, bins):
            filled[b] += size
        if filled == list(capacities):
            return True
    return False


def test_packings_refused_up_front_have_no_exact_fill_and_the_others_are_searched():
    rng = np.random.default_rng(5)
    refused = 0
    for trial in range(300):
        capacities = [8] * int(rng.integers(1, 4))
        if rng.random() < 0.3:
            capacities[0] = int(rng.integers(1, 8))
        total = sum(capacities)
        sizes = []
        while sum(sizes) < total:
            sizes.append(int(min(rng.integers(1, 9), total - sum(sizes))))
        sizes.sort(reverse=True)
        exists = _has_exact_packing(sizes, capacities)
        distinct = sorted(set(sizes), reverse=True)
        counts = tuple(sizes.count(s) for s in distinct)
        if not _large_items_have_hosts(distinct, counts, capacities):
            refused += 1
            assert not exists, (sizes, capacities)
        assignment = _exact_packing(sizes, capacities)
        assert (assignment is not None) == exists
        if assignment is not None:
            filled = [0] * len(capacities)
            for size, b in zip(sizes, assignment):
                filled[b] += size
            assert filled == capacities
    assert refused >= 30
