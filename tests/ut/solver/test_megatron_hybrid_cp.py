"""Megatron-LM's hybrid CP scheduler as a baseline: hand-derived layouts of its rules, errors, and
valid power-of-two plans on the project's workloads."""
from __future__ import annotations

import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import InfeasibleSampleError, SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.baselines import BASELINES, BaselineInfeasibleError, megatron_hybrid_cp
from mindspeed_mm.core.fcp.solver.megatron_hybrid_cp import equal_work_buckets, power_of_two_degree
from scenario_costs import a3_scenario

WORKLOADS = ("msrvtt", "internvid", "openvid", "imagevideo", "bimodal")


def _tiny() -> CostModel:
    """An A3 cost model whose ranks hold 100 tokens, so hand-made batches exercise the rules."""
    return a3_scenario(max_tokens_per_rank=100)


def _layout(plan) -> list[list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Per round: (ranks, samples) of each group."""
    return [[(g.ranks, g.samples) for g in r.groups] for r in plan.rounds]


def _plan(lengths: list[int], num_ranks: int, **options):
    cost = _tiny()
    plan = megatron_hybrid_cp(lengths, cost, SolverConfig(num_ranks=num_ranks), **options)
    validate_plan(plan, lengths, cost, priced=True)
    return plan


def test_registered_as_a_per_batch_baseline() -> None:
    assert BASELINES["megatron_hybrid_cp"].planner is megatron_hybrid_cp
    assert BASELINES["megatron_hybrid_cp"].static_algo is None


def test_degrees_are_the_powers_of_two_that_hold_a_sample() -> None:
    assert [power_of_two_degree(n, 100) for n in (1, 100, 101, 200, 201, 300, 400, 401, 800)] == [
        1, 1, 2, 2, 4, 4, 4, 8, 8]
    # 250 and 300 tokens need 3 ranks; Megatron gives them 4, two such groups fill 8 ranks.
    plan = _plan([250, 300], 8)
    assert _layout(plan) == [[((0, 1, 2, 3), (1,)), ((4, 5, 6, 7), (0,))]]
    assert {g.algo for g in plan.rounds[0].groups} == {"ring"}


def test_buckets_split_the_queue_into_equal_work_runs() -> None:
    lengths = [350, 150, 80, 60, 50]
    degrees = [power_of_two_degree(n, 100) for n in lengths]
    # Work L^2 / d: 30625, 11250, 6400, 3600, 2500; three degrees, target 18125 (x 1.1 = 19937.5).
    assert [list(b) for b in equal_work_buckets(range(5), lengths, degrees)] == [[0], [1, 2], [3, 4]]
    # One degree (k = 1): a run closes once the samples left are no more than k minus twice the
    # runs closed, so the last sample gets a bucket of its own.
    lengths = [60, 50, 40, 30]
    assert [list(b) for b in equal_work_buckets(range(4), lengths, [1] * 4)] == [[0, 1, 2], [3]]


def test_a_sample_waits_when_no_group_of_its_degree_has_room() -> None:
    plan = _plan([350, 150, 80, 60, 50], 4)
    # Round 0: 350 takes all four ranks and nothing else can go. Round 1: 150 opens a 2-rank group,
    # 80 and 60 one-rank groups; 50 fits beside neither (130, 110 > 100 tokens), so the round ends.
    # Round 2: 50 alone, its group doubled twice.
    assert _layout(plan) == [
        [((0, 1, 2, 3), (0,))],
        [((0, 1), (1,)), ((2,), (2,)), ((3,), (3,))],
        [((0, 1, 2, 3), (4,))],
    ]


def test_a_sample_joins_the_least_loaded_group_of_its_degree_with_room() -> None:
    plan = _plan([70, 60, 30, 20], 2, trim=False)
    # 70 and 60 open groups (loads 4900, 3600); 30 joins the lighter one (4500); 20 cannot join it
    # (110 tokens) and joins the 70 group.
    assert _layout(plan) == [[((0,), (0, 3)), ((1,), (1, 2))]]


def test_trim_sends_the_heaviest_groups_last_sample_to_the_next_round() -> None:
    plan = _plan([70, 60, 30, 20], 2)
    # Loads 5300 and 4500 differ by more than 5 %; taking 20 off the 70 group leaves 4900 and 4500,
    # a narrower spread, so it goes to the next round. The 70 group keeps a single sample: trim stops.
    assert _layout(plan) == [
        [((0,), (0,)), ((1,), (1, 2))],
        [((0, 1), (3,))],
    ]
    assert plan.extras["trim"] is True
    # Loads 4500 (60 + 30) and 4100 (50 + 40): taking 30 off would leave 3600 against 4100, a wider
    # spread, so the round stays as it is.
    assert _layout(_plan([60, 50, 40, 30], 2)) == [[((0,), (0, 3)), ((1,), (1, 2))]]


def test_early_exit_once_a_smaller_degree_balances_the_ranks() -> None:
    plan = _plan([141, 99, 99, 1], 4)
    # 141 on two ranks (load 9940.5), then the 99s of degree 1 (9801 each) occupy every rank within
    # 5 % of the largest load: the round ends although 1 would fit beside a 99.
    assert _layout(plan) == [
        [((0, 1), (0,)), ((2,), (1,)), ((3,), (2,))],
        [((0, 1, 2, 3), (3,))],
    ]
    # Balanced ranks before any smaller degree was placed do not end the round: both 10s join.
    assert _layout(_plan([50, 50, 10, 10], 2)) == [[((0,), (0, 2)), ((1,), (1, 3))]]


def test_doubling_grows_the_earliest_smallest_group_first() -> None:
    plan = _plan([150, 50], 8)
    # Groups of 2 and 1 leave 5 ranks: the 1 doubles to 2, then the first 2 (the 150) to 4, then
    # the other to 4.
    assert _layout(plan) == [[((0, 1, 2, 3), (0,)), ((4, 5, 6, 7), (1,))]]
    # Three one-rank groups and a free rank: the first opened (the 50) doubles.
    assert _layout(_plan([50, 40, 30], 4)) == [[((0, 1), (0,)), ((2,), (1,)), ((3,), (2,))]]


def test_rejects_what_megatron_cannot_place() -> None:
    cost = _tiny()
    with pytest.raises(BaselineInfeasibleError, match="cannot tile 6 ranks"):
        megatron_hybrid_cp([10] * 6, cost, SolverConfig(num_ranks=6))
    with pytest.raises(BaselineInfeasibleError, match="sample 1 \\(500 tokens\\) needs a power-of-two degree 8"):
        megatron_hybrid_cp([10, 500], cost, SolverConfig(num_ranks=8, max_degree=6))
    # Longer than N x capacity: the input error every planner raises.
    with pytest.raises(InfeasibleSampleError, match="sample 2 \\(length 801 tokens\\)"):
        megatron_hybrid_cp([10, 20, 801], cost, SolverConfig(num_ranks=8))
    with pytest.raises(ValueError, match="cp_degree must be None"):
        megatron_hybrid_cp([10], cost, SolverConfig(num_ranks=8), cp_degree=2)


@pytest.mark.parametrize("num_ranks", [8, 64])
@pytest.mark.parametrize("workload", WORKLOADS)
def test_plans_are_valid_on_the_workloads(workload: str, num_ranks: int) -> None:
    cost = a3_scenario(shard_ranks=num_ranks)
    config = SolverConfig(num_ranks, ranks_per_node=cost.ranks_per_node)
    for seed in range(2):
        lengths, patches = draw_lengths(workload, 8 * num_ranks, seed)
        for trim in (True, False):
            plan = megatron_hybrid_cp(lengths, cost, config, patches, trim=trim)
            validate_plan(plan, lengths, cost, patches, priced=True)
            assert plan.extras["strategy"] == "megatron_hybrid_cp"
            for r in plan.rounds:
                for g in r.groups:
                    assert g.degree & (g.degree - 1) == 0 and g.ranks[0] % g.degree == 0
