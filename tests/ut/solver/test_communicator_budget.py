"""The communicator budget: the slot grid, the catalogue of groups a run may use, and plans that stay in it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import GroupPlan, Plan, RoundPlan, SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.communicators import (
    budget_guaranteeing, default_budget, group_catalogue, group_communicators, plan_communicators,
)
from mindspeed_mm.core.fcp.solver.errors import CommunicatorBudgetError, InvalidPlanError
from mindspeed_mm.core.fcp.solver.hybrid_split import HybridSplit
from mindspeed_mm.core.fcp.solver.placement import slot_grid_placement, slot_of
from mindspeed_mm.core.fcp.solver.plan import IDLE

ALGOS = ("ring", "ulysses")


def _random_round(rng: np.random.Generator, num_ranks: int) -> list[int]:
    """Degrees summing to `num_ranks`: as many one-rank groups as others, these of 2..num_ranks / 4 ranks."""
    degrees = []
    while sum(degrees) < num_ranks:
        size = 1 if rng.random() < 0.5 else int(rng.integers(2, max(2, num_ranks // 4) + 1))
        degrees.append(min(size, num_ranks - sum(degrees)))
    return degrees


@pytest.mark.parametrize("num_ranks, node", [(64, 16), (48, 8), (32, 6)])
def test_the_slot_grid_puts_every_rank_in_one_group_per_degree(num_ranks, node) -> None:
    rng = np.random.default_rng(5)
    ranges_of: dict[tuple[int, int], set[int]] = {}   # (rank, degree) -> first ranks of its groups of that degree
    placed = 0
    for _ in range(300):
        degrees = _random_round(rng, num_ranks)
        placement = slot_grid_placement(degrees, num_ranks, node)
        if placement is None:
            continue
        placed += 1
        covered = sorted(r for s, d in zip(placement.starts, degrees) for r in range(s, s + d))
        assert covered == list(range(num_ranks))
        for start, degree, part in zip(placement.starts, degrees, placement.node_parts):
            if degree > 1:
                assert start % slot_of(degree) == 0
            for rank in range(start, start + degree):
                ranges_of.setdefault((rank, degree), set()).add(start)
        if node & (node - 1) == 0:   # a power-of-two node: groups of at most a node's ranks stay in one
            assert placement.straddling == 0
    assert placed > 100
    assert all(len(starts) == 1 for starts in ranges_of.values())


@pytest.mark.parametrize("num_ranks", [16, 48, 64, 96])
def test_powers_of_two_always_fit_the_grid(num_ranks) -> None:
    rng = np.random.default_rng(num_ranks)
    for _ in range(200):
        degrees, left = [], num_ranks
        while left:
            degree = 1 << int(rng.integers(0, left.bit_length()))
            degrees.append(degree)
            left -= degree
        assert slot_grid_placement(degrees, num_ranks, 8) is not None
    # A round whose slots do not pack: two groups of 6 need two 8-slots of a plane of 12.
    assert slot_grid_placement([6, 6], 12, 4) is None


@pytest.mark.parametrize("num_ranks", [8, 64, 256, 1024])
def test_the_default_catalogue_fills_the_budget(num_ranks) -> None:
    catalogue = SolverConfig(num_ranks).catalogue(ALGOS)
    assert catalogue.budget == default_budget(num_ranks) == int(math.log2(num_ranks)) + 4
    assert catalogue.worst == catalogue.budget == max(catalogue.counts)
    counts = np.zeros(num_ranks, dtype=int)
    for members in catalogue.communicators():   # the counts are those of the communicators, the plane's included
        counts[list(members)] += 1
    assert counts.tolist() == list(catalogue.counts)
    assert tuple(range(num_ranks)) in catalogue.communicators()
    powers = [1 << k for k in range(1, num_ranks.bit_length())]
    assert set(powers) <= set(catalogue.degrees)   # the whole chain, up to the plane
    extras = sorted(set(catalogue.degrees) - set(powers))
    assert extras == ([3, 5, 6, 7] if num_ranks == 8 else [3, 6, 12, 24])


def test_small_planes_allow_every_range_and_small_budgets_shorten_the_chain() -> None:
    four = group_catalogue(4, 4, default_budget(4), ALGOS, plane=True)
    assert four.contiguous and four.worst == 5 and four.allows(1, 3)
    short = group_catalogue(64, 64, 3, ALGOS, plane=True)
    assert short.degrees == (2, 4, 64) and short.worst == 3 and short.guaranteed_degree == 64
    assert group_catalogue(64, 16, 3, ALGOS, plane=True).degrees == (2, 4)
    # Without the plane's group (independent groups: no round spreads its media), one more degree fits.
    assert group_catalogue(64, 64, 10, ALGOS, plane=False).degrees == (2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
    assert budget_guaranteeing(64, 16, ALGOS, True, 16) == 5
    assert group_catalogue(64, 16, 5, ALGOS, True).guaranteed_degree == 16


def test_communicators_are_counted_through_one_function() -> None:
    assert group_communicators((3, 4, 5), "ring") == group_communicators((3, 4, 5), "ulysses") == ((3, 4, 5),)
    assert group_communicators((7,), "ring") == () and group_communicators((2, 3), IDLE) == ()


def test_hybrid_rings_count_in_the_budget() -> None:
    algos = ALGOS + ("hybrid",)
    # 8-rank nodes, blocks of 8: after the chain, degrees 16, 32 and 64 run hybrid as 8 x 2, 8 x 4 and 8 x 8, one ring
    # per rank each; the one communicator left goes to degree 3.
    catalogue = group_catalogue(64, 64, 10, algos, plane=True, hybrid_block=8)
    assert catalogue.degrees == (2, 3, 4, 8, 16, 32, 64) and catalogue.hybrid_degrees == (16, 32, 64)
    assert catalogue.worst == 10
    rings = [c for c in catalogue.communicators() if c != tuple(range(c[0], c[0] + len(c)))]
    assert rings == sorted({tuple(range(s + j, s + d, 8)) for d in (16, 32, 64) for s in range(0, 64, d)
                            for j in range(8)})
    assert group_communicators(tuple(range(16)), "hybrid", 8) == (tuple(range(16)), tuple(range(8)),
                                                                 tuple(range(8, 16)), *((j, 8 + j) for j in range(8)))
    # Without hybrid groups the budget holds the extra degrees instead; a larger one holds both.
    assert group_catalogue(64, 64, 10, ALGOS, plane=True, hybrid_block=8).degrees == (2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
    assert group_catalogue(64, 64, 12, algos, plane=True, hybrid_block=8).degrees == (2, 3, 4, 6, 8, 12, 16, 32, 64)
    # A hybrid group of 16 runs 8 x 2 (or 16 x 1, 1 x 16: no extra communicator); 4 x 4 needs rings it does not have.
    def plan_with(split: HybridSplit) -> Plan:
        groups = (GroupPlan(tuple(range(16)), 16, "hybrid", (0,), 1.0, hybrid=split),
                  *(GroupPlan((r,), 1, "ring", (r - 15,), 1.0) for r in range(16, 64)))
        return Plan((RoundPlan(groups, 1.0),), 1.0, 1.0, 0.0, 64)

    for fine in (HybridSplit(8, 2), HybridSplit(16, 1), HybridSplit(1, 16)):
        catalogue.check_plan(plan_with(fine))
    with pytest.raises(InvalidPlanError, match=r"round 0, group on ranks 0..15: hybrid split 4 x 4 is not the run's "
                                               r"\(hybrid degrees \[16, 32, 64\], blocks of at most 8 ranks\)"):
        catalogue.check_plan(plan_with(HybridSplit(4, 4)))
    # The unbounded ablation: every degree with a proper split, counted.
    unbounded = group_catalogue(64, 64, None, algos, plane=True, hybrid_block=8)
    assert unbounded.hybrid_degrees[:4] == (4, 6, 8, 10) and unbounded.worst > 10 * catalogue.worst


@pytest.mark.parametrize("workload, preset, ranks, per_rank", [
    ("imagevideo", "h200-qwen3vl-8b", 64, 2),
    ("openvid", "a3-qwen3vl-8b", 64, 8),
    ("bimodal", "a3-qwen3vl-8b", 256, 1),
])
def test_plans_use_only_catalogue_groups(workload, preset, ranks, per_rank) -> None:
    cost = CostModel.from_preset(preset, shard_ranks=ranks)
    config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node)
    catalogue = config.catalogue(cost.algos, cost.hybrid_rule.block)
    for seed in range(3):
        lengths, patches = (x.tolist() for x in draw_lengths(workload, per_rank * ranks, seed=seed))
        plan = plan_batch(lengths, cost, config, patches=patches)
        validate_plan(plan, lengths, cost, patches, priced=True)
        catalogue.check_plan(plan)
        assert plan_communicators(plan) <= set(catalogue.communicators())


def test_a_sample_wider_than_the_budget_allows_names_the_budget() -> None:
    cost = CostModel.from_preset("a3-qwen3vl-8b", shard_ranks=64)
    needs_5 = [4 * cost.capacity_tokens + 1] + [1000] * 63
    with pytest.raises(CommunicatorBudgetError, match=r"sample 0 \(length \d+ tokens\) needs at least 5 ranks .* "
                                                      r"communicator budget .* of 3 communicators per rank the widest "
                                                      r"group is 4 ranks"):
        plan_batch(needs_5, cost, SolverConfig(64, max_degree=16, ranks_per_node=16, communicator_budget=3))
