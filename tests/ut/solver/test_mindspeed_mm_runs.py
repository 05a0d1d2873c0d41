"""The runs MindSpeed-MM's Qwen3-VL users have today, as the simulator prices them."""
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.baseline_common import BaselineInfeasibleError
from mindspeed_mm.core.fcp.solver.mindspeed_mm_runs import (
    upstream_dynamic_batching, upstream_run, upstream_sampler_cp,
)
from mindspeed_mm.core.fcp.solver.plan import IDLE
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, step_ms

COST = CostModel.from_preset("h200-qwen3vl-8b", shard_ranks=16)
CONFIG = SolverConfig(16, ranks_per_node=8)


def _batch(workload="openvid", n=64, seed=0):
    lengths, patches = draw_lengths(workload, n, seed)
    return lengths.tolist(), patches.tolist()


def test_the_sampler_runs_one_sample_per_micro_batch_dealt_round_robin():
    lengths, patches = _batch()
    plan = upstream_sampler_cp(lengths, COST, CONFIG, patches, cp_degree=4)
    validate_plan(plan, lengths, COST, patches, priced=True)
    assert plan.num_rounds == 64 // 4
    for k, round_plan in enumerate(plan.rounds):
        assert [g.samples for g in round_plan.groups] == [(4 * k + r,) for r in range(4)]
        assert {(g.degree, g.algo) for g in round_plan.groups} == {(4, "ulysses")}


def test_the_sampler_needs_a_global_batch_that_dp_divides():
    lengths, patches = _batch(n=62)
    with pytest.raises(BaselineInfeasibleError, match="not a multiple of DP = 4"):
        upstream_sampler_cp(lengths, COST, CONFIG, patches, cp_degree=4)


def test_dynamic_batching_fills_micro_batches_to_the_group_budget():
    lengths, patches = _batch("msrvtt", 256, 1)
    plan = upstream_dynamic_batching(lengths, COST, CONFIG, patches, cp_degree=2, algo="ring")
    validate_plan(plan, lengths, COST, patches, priced=True)
    budget = 2 * COST.capacity_tokens
    planned = sorted(s for r in plan.rounds for g in r.groups for s in g.samples)
    assert planned == list(range(256))
    for round_plan in plan.rounds:
        for g in round_plan.groups:
            if g.algo == IDLE:
                continue
            assert (g.samples[0] - g.ranks[0] // 2) % 8 == 0   # the replica's own samples
            assert len(g.samples) == 1 or sum(lengths[s] for s in g.samples) <= budget
    # Fewer rounds than one sample per micro-batch.
    assert plan.num_rounds < 256 // 8


def test_the_tuned_runs_are_no_slower_than_the_default_and_fcp_is_no_slower_than_either():
    batches = [draw_lengths("internvid", 64, seed) for seed in (0, 1)]
    default = upstream_run(batches, COST, CONFIG, "mindspeed_mm_sampler", tuned=False)
    tuned = upstream_run(batches, COST, CONFIG, "mindspeed_mm_sampler", tuned=True)
    dynamic = upstream_run(batches, COST, CONFIG, "mindspeed_mm_dynamic_batching", tuned=True)
    assert default.algo == "ulysses" and sum(tuned.step_ms) <= sum(default.step_ms)
    for k, (lengths, patches) in enumerate(batches):
        fcp = step_ms(plan_batch(lengths.tolist(), COST, CONFIG, patches.tolist()), COST, LOCKSTEP)
        assert fcp <= tuned.step_ms[k] and fcp <= dynamic.step_ms[k]
