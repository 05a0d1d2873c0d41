"""Whole-step layouts of large batches (joint starts, step estimates) and the round polish."""
from dataclasses import replace

import numpy as np
import pytest

from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.simulate.workloads import generate_samples
from mindspeed_mm.core.fcp.solver import SolverConfig, lean_search, plan_batch, planner
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer, SampleWorkloads
from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver
from mindspeed_mm.core.fcp.solver.round_polish import polish_round
from mindspeed_mm.core.fcp.solver.rounds import min_rounds
from mindspeed_mm.core.fcp.solver.step_layout import _balanced, _deal, joint_starts, own_groups, step_estimates
from solver_fakes import FakeCostModel, FakeTable
from scenario_costs import a3_scenario

A3_8B = a3_scenario()
FAKE = FakeCostModel(FakeTable(capacity_tokens=16384, ranks_per_node=8))
SIZES = (1, 2, 4, 8, 16)


def _solver(cost, lengths, patches, num_ranks):
    mins = np.maximum(1, -(-np.asarray(lengths) // cost.capacity_tokens))
    workloads = SampleWorkloads(cost, lengths, patches)
    timer = GroupTimer(cost, num_ranks)
    facts = planner._sample_facts(lengths, workloads, mins, timer, cost.capacity_tokens, num_ranks)
    limits = replace(planner._LEAN, uniform_degrees=SIZES)
    return RoundSolver(facts, timer, cost.capacity_tokens, num_ranks, limits)


def _batch(dataset, n, seed):
    batch = generate_samples(dataset, n, seed=seed)
    return batch.lengths.tolist(), batch.vision_patches.tolist()


@pytest.mark.parametrize("dataset, rounds, degree", [("openvid", 2, 2), ("internvid", 2, 8), ("internvid", 3, 2)])
def test_joint_starts_cover_every_sample_once_and_fit(dataset, rounds, degree):
    lengths, patches = _batch(dataset, 400, seed=3)
    solver = _solver(A3_8B, lengths, patches, 64)
    starts = joint_starts(solver, rounds, degree)
    assert starts is not None and len(starts) == rounds
    seen = np.concatenate([s.members for s in starts])
    assert sorted(seen.tolist()) == list(range(len(lengths)))
    capacity = A3_8B.capacity_tokens
    for start in starts:
        groups = start.grouping()
        tokens = np.array([sum(lengths[i] for i in g) for g in groups])
        np.testing.assert_array_equal(start.min_degrees, np.maximum(1, -(-tokens // capacity)))
        assert start.min_degrees.sum() <= 64
        # A sample that needs more than `degree` ranks never shares its group with another such sample.
        wide = [sum(1 for i in g if solver.min_degrees[i] > degree) for g in groups]
        assert max(wide) <= 1
        # The optimal makespan of the start is attained by the cost model's times of its groups.
        times = [min(float(A3_8B.best_time_ms(A3_8B.workload([lengths[i] for i in g], [patches[i] for i in g]),
                                              np.array([int(start.min_degrees[k]) + s]))[0][0])
                     for s in range(start.times.shape[1])) for k, g in enumerate(groups)]
        assert max(times) <= start.makespan * (1 + 1e-9)


def test_slowest_groups_are_dealt_to_the_first_rounds():
    load = np.array([1.0, 9.0, 5.0, 7.0, 3.0, 0.0])
    filled = np.array([True, True, True, True, True, False])
    # Three rounds of 4 ranks, groups of 2 ranks: the two slowest (1, 3) share round 0, the next two
    # round 1; the empty group gets no round.
    np.testing.assert_array_equal(_deal(load, [2] * 6, filled, 3, 4), [2, 0, 1, 0, 1, -1])
    # A group wider than what is left in every round goes where most ranks are left.
    np.testing.assert_array_equal(_deal(np.array([1.0, 2.0, 3.0]), [3, 3, 3], np.ones(3, dtype=bool), 2, 4),
                                  [0, 1, 0])


def test_step_estimates_by_hand_and_for_samples_that_need_more_ranks():
    # 64 equal short samples on 16 ranks: no sample is long, so the estimate is rounds x (F + W / groups).
    lengths = [2000] * 64
    solver = _solver(A3_8B, lengths, None, 16)
    twin = solver.memory_free_timer().cost
    degrees = np.array([1, 2, 4])
    whole = twin.best_time_ms(twin.workload(lengths), degrees)[0]
    empty = twin.best_time_ms(twin.workload([]), degrees)[0]
    for rounds in (1, 2):
        expected = [rounds * (empty[k] + (whole[k] - empty[k]) / (rounds * 16 / d)) for k, d in enumerate(degrees)]
        np.testing.assert_allclose(step_estimates(solver, rounds, [1, 2, 4]), expected, rtol=1e-12)
    # Four samples that each need 3 ranks cannot share 4 ranks in one round: inf; in two rounds they fit.
    capacity = A3_8B.capacity_tokens
    solver = _solver(A3_8B, [3 * capacity - 5] * 4 + [100] * 8, None, 8)
    assert step_estimates(solver, 1, [1, 2]) == [float("inf")] * 2
    assert all(np.isfinite(step_estimates(solver, 2, [1, 2])))


def test_a_size_no_algo_runs_on_is_estimated_inf_without_arithmetic_on_inf():
    # Ulysses alone splits the 32 heads of the 8B model over at most 32 ranks: groups of 64 have no algo.
    ulysses = a3_scenario(algos=("ulysses",))
    lengths = [3000] * 60 + [40_000] * 4
    solver = _solver(ulysses, lengths, None, 64)
    with np.errstate(all="raise"):
        estimates = step_estimates(solver, 1, [16, 32, 64])
    assert np.isfinite(estimates[:2]).all() and estimates[2] == float("inf")


def _image_video_batch(ranks, per_rank, index):
    lengths, patches = draw_lengths("imagevideo", ranks * per_rank * 8, 7)
    size = ranks * per_rank
    return lengths[index * size:(index + 1) * size].tolist(), patches[index * size:(index + 1) * size].tolist()


def test_own_groups_closed_to_the_other_samples_when_they_hold_much_of_the_ranks(monkeypatch):
    # The times below are ring and Ulysses groups' (hybrid groups of 32 also shorten the open start).
    cost = a3_scenario(shard_ranks=256, algos=("ring", "ulysses"))
    lengths, patches = _image_video_batch(256, 2, 1)
    solver = _solver(cost, lengths, patches, 256)
    mask, widths = own_groups(solver, 4, _balanced(solver, 1, [4])[0], 1)
    assert mask.sum() == 8 and widths.sum() > 256 // 2   # 8 videos with groups of their own
    open_start, = joint_starts(solver, 1, 4)
    closed_start, = joint_starts(solver, 1, 4, closed=True)
    own = set(np.flatnonzero(mask).tolist())
    groups = closed_start.grouping()
    assert sorted(g for g in groups if own & set(g)) == sorted((i,) for i in own)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    # 4,795 ms open (the other samples also fill the videos' groups), 4,515 ms closed.
    assert closed_start.makespan < 0.95 * open_start.makespan
    # The planner tries it for every size and keeps it here (groups placed anywhere: within the communicator
    # budget the degrees this start balances on are not all allowed).
    config = SolverConfig(256, ranks_per_node=cost.ranks_per_node, communicator_budget=None)
    with_closed = plan_batch(lengths, cost, config, patches=patches)
    both = lean_search.joint_starts
    monkeypatch.setattr(lean_search, "joint_starts", lambda solver, rounds, degree, closed=False: (
        None if closed else both(solver, rounds, degree)))
    only_open = plan_batch(lengths, cost, config, patches=patches)
    assert with_closed.predicted_ms < 0.97 * only_open.predicted_ms


def test_one_more_round_tries_the_losing_kind_of_start_only_when_it_had_none_or_the_winner_improves(monkeypatch):
    cost = a3_scenario(shard_ranks=24)
    lengths, patches = draw_lengths("imagevideo", 192, 1)
    # The search as it sees the samples' patches (each group's media on its own members).
    config = SolverConfig(24, ranks_per_node=cost.ranks_per_node, vision_over_round=False)
    tried, every = [], lean_search.joint_starts

    def recorded(solver, rounds, degree, closed=False):
        starts = every(solver, rounds, degree, closed=closed)
        tried.append((rounds, degree, closed, None if starts is None else sum(s.makespan for s in starts)))
        return starts

    monkeypatch.setattr(lean_search, "joint_starts", recorded)
    plan = plan_batch(lengths, cost, config, patches=patches)
    later = [(rounds, closed, total) for rounds, degree, closed, total in tried if rounds > 1]
    assert all(degree == 8 for rounds, degree, _, _ in tried if rounds > 1)
    # Size 8 had no closed start with one round: two rounds try both kinds, and the closed one wins.
    (_, open_closed, open_ms), (_, closed_closed, closed_ms) = later[:2]
    assert later[0][0] == later[1][0] == 2 and (open_closed, closed_closed) == (False, True) and closed_ms < open_ms
    # Three rounds: the closed start first; it does not beat two rounds, so the open one (which lost
    # with two rounds) is not built.
    assert later[2:] == [(3, True, later[2][2])] and later[2][2] > closed_ms
    assert plan.num_rounds == 2 and plan.predicted_ms == pytest.approx(closed_ms, rel=0.01)


def test_own_groups_holding_few_ranks_are_not_closed():
    cost = a3_scenario(shard_ranks=64)
    lengths, patches = _image_video_batch(64, 8, 0)
    solver = _solver(cost, lengths, patches, 64)
    mask, widths = own_groups(solver, 8, _balanced(solver, 1, [8])[0], 1)
    assert 0 < widths.sum() < 64 // 4
    assert joint_starts(solver, 1, 8) is not None and joint_starts(solver, 1, 8, closed=True) is None


@pytest.mark.parametrize("cost", [A3_8B, FAKE], ids=["a3-8b", "fake"])
def test_polish_keeps_degrees_and_samples_and_never_slows_a_round(cost):
    lengths, patches = _batch("openvid", 300, seed=5)
    patches = patches if cost is A3_8B else None
    solver = _solver(cost, lengths, patches, 32)
    changed = 0
    rounds = min_rounds(lengths, 32, cost.capacity_tokens) + 1
    for start in joint_starts(solver, rounds, 2):
        before = polish_round(solver, start, 0)
        after = polish_round(solver, start, 3)
        assert after.makespan <= before.makespan
        changed += after.makespan < before.makespan
        assert sorted(g.degree for g in after.groups) == sorted(g.degree for g in before.groups)
        assert sum(g.degree for g in after.groups) == 32
        assert sorted(i for g in after.groups for i in g.samples) == sorted(start.members.tolist())
        for group in after.groups:
            work = cost.workload([lengths[i] for i in group.samples],
                                 None if patches is None else [patches[i] for i in group.samples])
            assert float(cost.group_time_ms(work, group.degree, group.algo)) == pytest.approx(group.predicted_ms,
                                                                                             rel=1e-9)
        assert after.makespan == max(g.predicted_ms for g in after.groups)
    assert changed   # the polish found something to do on this batch


def test_exchanged_workloads_equal_rebuilt_ones():
    lengths, patches = _batch("internvid", 40, seed=1)
    columns = SampleWorkloads(A3_8B, lengths, patches)
    assert columns.columns is not None
    generic = SampleWorkloads(FAKE, lengths, None)
    groups = [[0, 1, 2, 3], [4, 5, 6], [7, 8]]
    rows = np.array([0, 1, 2, 0, 1])
    minus = np.array([2, -1, 8, -1, 5])
    plus = np.array([7, 9, -1, -1, 3])
    rebuilt = [[i for i in groups[r] if i != m] + ([p] if p >= 0 else []) for r, m, p in zip(rows, minus, plus)]
    got = columns.exchanged(groups, rows, minus, plus)
    want, _ = columns.groups(rebuilt)
    np.testing.assert_array_equal(got.values, want.values)
    assert generic.exchanged(groups, rows, minus, plus) == generic.groups(rebuilt)[0]


def test_batches_outside_left_out_samples_equal_rebuilt_ones():
    lengths, patches = _batch("openvid", 12, seed=3)
    columns = SampleWorkloads(A3_8B, np.asarray(lengths), np.asarray(patches))
    assert columns.columns is not None
    generic = SampleWorkloads(FAKE, lengths, None)
    left_out = np.zeros((3, 12), dtype=bool)
    left_out[0, [0, 5]] = True
    left_out[2, :] = True          # nothing left: an empty batch
    alone = np.array([4, 11])
    kept = [[i for i in range(12) if not left_out[k, i]] for k in range(3)]
    want = [A3_8B.workload([lengths[i] for i in b], [patches[i] for i in b]) for b in kept]
    want += [A3_8B.workload([lengths[i]], [patches[i]]) for i in alone]
    got = columns.outside(left_out, alone)
    np.testing.assert_array_equal(got.values, np.stack([A3_8B.workload_columns(
        [lengths[i] for i in b], [patches[i] for i in b]).values.sum(axis=0) for b in kept + [[4], [11]]]))
    assert [got.workload(k) for k in range(len(want))] == want
    assert generic.outside(left_out, alone) == [FAKE.workload([lengths[i] for i in b]) for b in kept + [[4], [11]]]
    singles = columns.singles_and_empty()
    assert [singles.workload(k) for k in range(13)] == [columns[i] for i in range(12)] + [A3_8B.workload([])]
    assert generic.singles_and_empty() == [generic[i] for i in range(12)] + [FAKE.workload([])]
