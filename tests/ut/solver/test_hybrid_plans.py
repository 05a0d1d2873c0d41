"""Plans with hybrid groups: each carries the split it was priced at, in its JSON and the plan's digest; the
checks refuse a hybrid group without a split or with blocks across nodes; the rank sets a group needs
communicators for."""
from __future__ import annotations

import dataclasses

import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import GroupPlan, InvalidPlanError, Plan, SolverConfig, plan_batch
from mindspeed_mm.core.fcp.solver import validate_plan
from mindspeed_mm.core.fcp.solver.hybrid_split import HybridSplit, communicator_rank_sets


@pytest.fixture(scope="module")
def h200_plan() -> tuple[Plan, list[int], list[int], CostModel]:
    """Image + video on 64 H200 ranks (8 per node): groups of 16 or more span nodes, Ulysses over them would
    all-to-all across nodes; the plan runs hybrid groups of blocks of 8."""
    cost = CostModel.from_preset("h200-qwen3vl-8b", shard_ranks=64)
    lengths, patches = draw_lengths("imagevideo", 512, 0)
    plan = plan_batch(lengths, cost, SolverConfig(64, ranks_per_node=8), patches)
    return plan, lengths.tolist(), patches.tolist(), cost


def _hybrid_groups(plan: Plan) -> list[GroupPlan]:
    return [g for r in plan.rounds for g in r.groups if g.algo == "hybrid"]


def test_a_planned_hybrid_group_carries_the_split_it_was_priced_at(h200_plan) -> None:
    plan, lengths, patches, cost = h200_plan
    validate_plan(plan, lengths, cost, patches, priced=True)
    hybrid = _hybrid_groups(plan)
    # Blocks of 8 (a node), one ring across the nodes: the split of every hybrid degree of the run's catalogue.
    assert hybrid and all(g.degree in (16, 32, 64) and g.hybrid == HybridSplit(8, g.degree // 8) for g in hybrid)
    assert all(g.hybrid is None for r in plan.rounds for g in r.groups if g.algo != "hybrid")
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.digest() == plan.digest()
    first = next((r, k) for r, round_plan in enumerate(plan.rounds) for k, g in enumerate(round_plan.groups)
                 if g.algo == "hybrid")
    degree = plan.rounds[first[0]].groups[first[1]].degree
    assert plan.to_json()["rounds"][first[0]]["groups"][first[1]]["hybrid"] == {"ulysses_degree": 8,
                                                                               "ring_degree": degree // 8}
    # The split is part of the layout every rank checks: another split is another plan.
    other = dataclasses.replace(plan, rounds=tuple(dataclasses.replace(r, groups=tuple(
        dataclasses.replace(g, hybrid=HybridSplit(4, g.degree // 4)) if g.algo == "hybrid" else g
        for g in r.groups)) for r in plan.rounds))
    assert other.digest() != plan.digest()
    # A degree has one proper split (`HybridSplitRule`: one ring communicator per hybrid degree): 4 x r is not it.
    with pytest.raises(InvalidPlanError, match=r"split 4 x \d+ \(blocks inside nodes\) is infeasible at degree"):
        validate_plan(other, lengths, cost, patches)


def test_the_checks_refuse_a_hybrid_group_without_a_split_or_with_blocks_across_nodes(h200_plan) -> None:
    plan, lengths, patches, cost = h200_plan
    first = plan.rounds[0]
    bare = dataclasses.replace(plan, rounds=(dataclasses.replace(first, groups=tuple(
        dataclasses.replace(g, hybrid=None) for g in first.groups)),) + plan.rounds[1:])
    with pytest.raises(InvalidPlanError, match="must carry its Ulysses x ring split"):
        validate_plan(bare, lengths, cost, patches)
    # d x 1 would all-to-all across nodes of 8.
    wide = dataclasses.replace(plan, rounds=(dataclasses.replace(first, groups=tuple(
        dataclasses.replace(g, hybrid=HybridSplit(g.degree, 1)) if g.algo == "hybrid" else g
        for g in first.groups)),) + plan.rounds[1:])
    with pytest.raises(InvalidPlanError, match=r"split \d+ x 1 \(blocks inside nodes\) is infeasible"):
        validate_plan(wide, lengths, cost, patches)
    with pytest.raises(InvalidPlanError, match="belongs to a hybrid group of that degree"):
        GroupPlan((0, 1, 2, 3), 4, "ring", (0,), 1.0, hybrid=HybridSplit(2, 2))
    with pytest.raises(InvalidPlanError, match="belongs to a hybrid group of that degree"):
        GroupPlan((0, 1, 2, 3), 4, "hybrid", (0,), 1.0, hybrid=HybridSplit(2, 3))
    with pytest.raises(InvalidPlanError, match="hybrid split JSON must be"):
        GroupPlan.from_json({"ranks": [0, 1], "degree": 2, "algo": "hybrid", "samples": [0], "predicted_ms": 1.0,
                             "hybrid": {"ulysses_degree": 2}})


def test_a_forced_hybrid_plans_every_degree_one_rank_included() -> None:
    cost = CostModel.from_preset("a3-qwen3vl-8b", shard_ranks=16, algos=("hybrid",))
    lengths, patches = draw_lengths("openvid", 64, 3)
    plan = plan_batch(lengths, cost, SolverConfig(16, ranks_per_node=16), patches)
    validate_plan(plan, lengths.tolist(), cost, patches.tolist(), priced=True)
    groups = [g for r in plan.rounds for g in r.groups]
    assert all(g.algo == "hybrid" and g.hybrid.degree == g.degree for g in groups)
    assert any(g.degree == 1 and g.hybrid == HybridSplit(1, 1) for g in groups)


def test_the_rank_sets_a_group_needs_communicators_for() -> None:
    assert communicator_rank_sets((4, 5, 6), None) == ((4, 5, 6),)
    assert communicator_rank_sets((7,), None) == ()
    assert communicator_rank_sets((4, 5, 6, 7, 8, 9), HybridSplit(2, 3)) == (
        (4, 5, 6, 7, 8, 9), (4, 5), (6, 7), (8, 9), (4, 6, 8), (5, 7, 9))
    # Degenerate splits need the group alone: blocks of one rank, or one block of all.
    assert communicator_rank_sets((0, 1, 2), HybridSplit(1, 3)) == ((0, 1, 2),)
    assert communicator_rank_sets((0, 1, 2), HybridSplit(3, 1)) == ((0, 1, 2),)
    group = GroupPlan((0, 1, 2, 3), 4, "hybrid", (0,), 1.0, hybrid=HybridSplit(2, 2))
    assert group.communicator_rank_sets() == ((0, 1, 2, 3), (0, 1), (2, 3), (0, 2), (1, 3))
