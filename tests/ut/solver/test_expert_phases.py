"""Expert parallelism couples a round's groups every layer: each block of ep ranks runs at its slowest rank's pace,
its experts' work follows the block's mean tokens and its all-to-alls the rank holding the most."""
from __future__ import annotations

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel, preset_table
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.expert_phases import coupled_round, priced_with_expert_exchange
from mindspeed_mm.core.fcp.solver.mindspeed_mm_runs import upstream_sampler_cp
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, RoundPlan
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, step_ms


def _cost(expert_parallel: int) -> CostModel:
    return CostModel(preset_table("h200-qwen3vl-30b-a3b", shard_ranks=16, expert_parallel=expert_parallel))


def _group(cost: CostModel, first: int, degree: int, samples: tuple[int, ...], lengths: np.ndarray) -> GroupPlan:
    work = cost.workload(lengths[list(samples)].tolist())
    return GroupPlan(tuple(range(first, first + degree)), degree, "ring", samples,
                     float(cost.group_time_ms(work, degree, "ring")))


def test_a_block_runs_at_its_slowest_rank_with_its_mean_tokens_experts_and_its_busiest_ranks_exchange() -> None:
    cost = _cost(8)
    table, c = cost.table, cost.coefficients
    lengths = np.array([60_000, 4_000, 4_000, 12_000, 30_000, 2_000])
    # Block 0 (ranks 0-7): a long document on 4 ranks, two short ones on 2 ranks each; block 1 (8-15): 8 ranks.
    groups = (_group(cost, 0, 4, (0,), lengths), _group(cost, 4, 2, (1,), lengths), _group(cost, 6, 2, (2,), lengths),
              _group(cost, 8, 8, (3, 4, 5), lengths))
    coupled = coupled_round(RoundPlan(groups, max(g.predicted_ms for g in groups)), lengths, cost)
    layers, passes = table.layers_per_stage, 1 + 0.5   # full recompute: the forward pair of all-to-alls again
    linear_scale = 1 + 1 / (1 + table.time.linear_backward_ratio)

    def alone_without_experts(group: GroupPlan, tokens_per_rank: float) -> float:
        return group.predicted_ms - layers * (linear_scale * table.time.expert_ms_per_token * tokens_per_rank
                                              + passes * table.time.expert_exchange_ms(tokens_per_rank))

    per_rank = [15_000.0] * 4 + [2_000.0] * 4
    block0 = (max(alone_without_experts(g, t) for g, t in zip(groups[:3], (15_000.0, 2_000.0, 2_000.0)))
              + layers * linear_scale * table.time.expert_ms_per_token * np.mean(per_rank)
              + layers * passes * table.time.expert_exchange_ms(15_000.0))
    for g in coupled.groups[:3]:
        assert g.predicted_ms == pytest.approx(block0)
    # The long document's group gains from its block-mates' lighter experts' work; the short ones wait for it.
    assert coupled.groups[0].predicted_ms < groups[0].predicted_ms
    assert coupled.groups[1].predicted_ms > 3 * groups[1].predicted_ms
    # Block 1 is one group: priced alone, it is its own block.
    assert coupled.groups[3].predicted_ms == pytest.approx(groups[3].predicted_ms)
    assert coupled.predicted_ms == max(g.predicted_ms for g in coupled.groups) and coupled.expert_coupled
    assert RoundPlan.from_json(coupled.to_json()) == coupled
    assert c.routed_expert_ms(np.asarray(1000.0)) == pytest.approx(
        layers * linear_scale * table.time.expert_ms_per_token * 1000)


def test_plans_and_baselines_are_priced_as_the_blocks_run_them() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1_000, 40_000, size=48).tolist()
    config = SolverConfig(num_ranks=16, ranks_per_node=8)
    split, whole = _cost(8), _cost(1)
    plan = plan_batch(lengths, split, config)
    assert all(r.expert_coupled for r in plan.rounds) and plan.extras["expert_parallel"] == 8
    validate_plan(plan, lengths, split, priced=True)
    assert not any(r.expert_coupled for r in plan_batch(lengths, whole, config).rounds)
    baseline = upstream_sampler_cp(lengths, split, config, cp_degree=8, algo="ring")
    assert all(r.expert_coupled for r in baseline.rounds)
    validate_plan(baseline, lengths, split, priced=True)
    assert priced_with_expert_exchange(baseline, lengths, whole) is baseline
    # FCP against upstream's sampler under the same coupling.
    assert step_ms(plan, split, LOCKSTEP) < step_ms(baseline, split, LOCKSTEP)


def test_rank_counts_that_blocks_do_not_tile_are_refused() -> None:
    cost = _cost(8)
    lengths = np.array([1000, 1000])
    groups = (_group(cost, 0, 6, (0,), lengths), _group(cost, 6, 6, (1,), lengths))
    with pytest.raises(ValueError, match="expert parallelism over 8 ranks needs a multiple of 8 ranks, got 12"):
        coupled_round(RoundPlan(groups, max(g.predicted_ms for g in groups)), lengths, cost)
