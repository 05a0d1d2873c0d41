"""Tuned static layouts, their two execution semantics, the synthetic mixes and the degree restriction."""
import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import MIXES, WORKLOADS, draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.baselines import (
    BaselineInfeasibleError,
    deepspeed_ulysses,
    megatron_static_cp,
    static_layout_plan,
)
from mindspeed_mm.core.fcp.solver.plan import IDLE
from mindspeed_mm.core.fcp.solver.step_time import dataflow_ms, fsdp_step_ms, step_lower_bound_ms, step_ms
from mindspeed_mm.core.fcp.solver.tuned_static import INDEPENDENT, LOCKSTEP, static_degrees, tune_static
from scenario_costs import a3_scenario

COST = a3_scenario(shard_ranks=16)
CONFIG = SolverConfig(16, ranks_per_node=16)


def _batches(name="bimodal", k=2, gbs=64, seed=3):
    lengths, patches = draw_lengths(name, k * gbs, seed)
    return [(lengths[i * gbs:(i + 1) * gbs], patches[i * gbs:(i + 1) * gbs]) for i in range(k)]



@pytest.mark.parametrize("name", WORKLOADS)
def test_fcp_s_step_lower_bound_holds_for_every_static_layout_under_both_semantics(name):
    """The bound behind the flexibility report's `tuned_static_fsdp_over_bound`: no layout runs a batch faster."""
    for lengths, patches in _batches(name, k=2):
        for semantics in (LOCKSTEP, INDEPENDENT):
            bound = step_lower_bound_ms(plan_batch(lengths, COST, CONFIG, patches).lower_bound_ms, COST, semantics)
            for algo in COST.algos:
                for d in static_degrees(int(lengths.max()), COST, CONFIG, algo):
                    static = static_layout_plan(lengths, COST, CONFIG, patches, cp_degree=d, algo=algo,
                                                semantics=semantics)
                    assert step_ms(static, COST, semantics) >= bound

def test_tuned_static_is_the_best_of_every_static_layout():
    batches = _batches()
    tuned = tune_static(batches, COST, CONFIG, LOCKSTEP)
    longest = max(int(b[0].max()) for b in batches)
    totals = {}
    for algo, planner in (("ring", megatron_static_cp), ("ulysses", deepspeed_ulysses)):
        for d in static_degrees(longest, COST, CONFIG, algo):
            totals[(d, algo)] = sum(fsdp_step_ms(planner(l, COST, CONFIG, p, cp_degree=d), COST) for l, p in batches)
    assert len(totals) >= 3
    assert sum(tuned.step_ms) == pytest.approx(min(totals.values()))
    assert totals[(tuned.degree, tuned.algo)] == pytest.approx(sum(tuned.step_ms))
    for plan, (lengths, patches) in zip(tuned.plans, batches):
        validate_plan(plan, lengths, COST, patches, priced=True)


def test_independent_replicas_never_wait_longer_than_lockstep_rounds():
    saw_idle = False
    for lengths, patches in _batches("bimodal"):
        lockstep = megatron_static_cp(lengths, COST, CONFIG, patches, cp_degree=4)
        plan = static_layout_plan(lengths, COST, CONFIG, patches, cp_degree=4, algo="ring", semantics=INDEPENDENT)
        validate_plan(plan, lengths, COST, patches, priced=True)
        # The same micro-batches, each replica on its own block of ranks in every round.
        assert sorted(g.samples for r in plan.rounds for g in r.groups if g.algo != IDLE) == \
            sorted(g.samples for r in lockstep.rounds for g in r.groups)
        replica_ms = [sum(g.predicted_ms for r in plan.rounds for g in r.groups if g.ranks[0] // 4 == rep)
                      for rep in range(4)]
        assert all(g.algo == IDLE or g.ranks == tuple(range(g.ranks[0] // 4 * 4, g.ranks[0] // 4 * 4 + 4))
                   for r in plan.rounds for g in r.groups)
        saw_idle |= any(g.algo == IDLE for r in plan.rounds for g in r.groups)
        assert dataflow_ms(plan) == pytest.approx(max(replica_ms))
        assert sum(replica_ms) / 4 <= dataflow_ms(plan) <= lockstep.predicted_ms * (1 + 1e-12)
    assert saw_idle, "some replica should run fewer micro-batches than another"
    # Each semantics adds its own step costs to its rounds: DDP one reduction, FSDP a floor per round.
    step = COST.step
    ddp = tune_static(_batches("internvid"), COST, CONFIG, INDEPENDENT)
    for plan, step_ms in zip(ddp.plans, ddp.step_ms):
        assert step_ms == pytest.approx(dataflow_ms(plan) + step.replica_reduction_ms + step.optimizer_ms)
    fsdp = tune_static(_batches("internvid"), COST, CONFIG, LOCKSTEP)
    for plan, step_ms in zip(fsdp.plans, fsdp.step_ms):
        assert step_ms == pytest.approx(sum(max(r.predicted_ms, step.fsdp_round_ms) for r in plan.rounds)
                                        + step.optimizer_ms)
        assert step_ms > plan.predicted_ms


def test_no_static_layout_is_named():
    lengths = np.array([10 * COST.capacity_tokens, 100])
    with pytest.raises(BaselineInfeasibleError, match="no static"):
        tune_static([(lengths, None)], COST, SolverConfig(8, ranks_per_node=16), LOCKSTEP)


def test_mixes_are_seeded_and_shaped_as_documented():
    assert set(MIXES) <= set(WORKLOADS)
    for name in MIXES:
        a, pa = draw_lengths(name, 4000, 1)
        b, pb = draw_lengths(name, 4000, 1)
        assert np.array_equal(a, b) and np.array_equal(pa, pb) and (a > 0).all() and (pa >= 0).all()
    lengths, _ = draw_lengths("bimodal", 4000, 1)
    assert 0.12 < np.mean(lengths >= 40_000) < 0.18 and np.median(lengths) < 2500
    lengths, _ = draw_lengths("imagevideo", 4000, 1)
    assert np.mean(lengths <= 1280 + 500) > 0.6 and lengths.max() > 30_000
    with pytest.raises(ValueError, match="unknown workload"):
        draw_lengths("nope", 4, 0)


def test_planner_keeps_to_the_allowed_degrees():
    lengths, patches = draw_lengths("bimodal", 96, 2)
    config = SolverConfig(24, ranks_per_node=8, degrees=(1, 2, 4, 8, 16))
    cost = CostModel.from_preset("910b-qwen3vl-8b", shard_ranks=24)
    plan = plan_batch(lengths, cost, config, patches)
    validate_plan(plan, lengths, cost, patches, priced=True)
    assert {g.degree for r in plan.rounds for g in r.groups} <= {1, 2, 4, 8, 16}
    with pytest.raises(ValueError, match="degrees must be positive ints including 1"):
        SolverConfig(8, degrees=(2, 4))
