"""The step's own costs: the preset's figures, the table's `step` section and how a step adds them."""
import dataclasses
import json

import numpy as np

import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.analytic import params_per_rank
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS, preset_table
from mindspeed_mm.core.fcp.cost.table import ProfileTable, ProfileTableError, StepFigures
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, Plan, RoundPlan
from mindspeed_mm.core.fcp.solver.step_time import (
    INDEPENDENT,
    LOCKSTEP,
    dataflow_ms,
    fsdp_step_ms,
    replicas_step_ms,
    round_floor,
    step_lower_bound_ms,
)
from scenario_costs import a3_scenario


def _plan(round_ms: list[float]) -> Plan:
    rounds = tuple(RoundPlan(groups=(GroupPlan(ranks=(0,), degree=1, algo="ring", samples=(i,), predicted_ms=t),),
                             predicted_ms=t) for i, t in enumerate(round_ms))
    return Plan(rounds=rounds, predicted_ms=sum(round_ms), lower_bound_ms=1.0, solver_ms=0.0, num_ranks=1)


@pytest.mark.parametrize("ranks", [8, 64])
def test_preset_step_figures_follow_the_bus_bandwidth_and_byte_counts(ranks: int) -> None:
    table = preset_table("a3-qwen3vl-8b", shard_ranks=ranks)
    hw, model = HARDWARE["a3"], MODELS["qwen3vl-8b"]
    params = table.provenance["params_per_rank"]
    # 8 ranks fit an A3 node (point-to-point links), 64 span nodes (the per-rank network link).
    bus = hw.p2p_intra_bytes_per_s * hw.p2p_efficiency if ranks <= hw.ranks_per_node else (
        hw.inter_node_bytes_per_s * hw.inter_efficiency)
    share = (ranks - 1) / ranks
    step = table.step
    # bf16 parameters gathered twice, fp32 gradients reduce-scattered, once per round.
    assert step.fsdp_round_ms == pytest.approx(1e3 * (2 * 2 + 4) * params * share / bus)
    # DDP: one all-reduce of the fp32 gradients (twice a reduce-scatter's bytes), once per step.
    assert step.replica_reduction_ms == pytest.approx(1e3 * 2 * 4 * params * share / bus)
    # Adam on the rank's 1 / ranks of the state: 28 bytes per fp32 parameter + the bf16 copy.
    assert step.optimizer_ms == pytest.approx(1e3 * 30 * params / ranks / hw.memory_bytes_per_s)
    assert params == pytest.approx(params_per_rank(model, _setup_of(table)))


def _setup_of(table: ProfileTable):
    from mindspeed_mm.core.fcp.cost.analytic import Setup

    options = table.provenance["options"]
    return Setup(tp=table.tp, pp=table.pp, dtype=table.dtype, recompute=table.recompute,
                 sharding=options["sharding"], shard_ranks=options["shard_ranks"])


def test_one_rank_moves_no_bytes_and_an_unsharded_optimizer_runs_on_every_parameter() -> None:
    alone = preset_table("a3-qwen3vl-8b", shard_ranks=1).step
    assert alone.fsdp_round_ms == 0.0 and alone.replica_reduction_ms == 0.0
    unsharded = preset_table("a3-qwen3vl-8b", shard_ranks=8, sharding="none").step
    sharded = preset_table("a3-qwen3vl-8b", shard_ranks=8).step
    assert unsharded.optimizer_ms == pytest.approx(8 * sharded.optimizer_ms)


def test_the_step_section_round_trips_and_is_checked(tmp_path) -> None:
    table = preset_table("cpu-tiny", shard_ranks=4)
    path = tmp_path / "t.json"
    table.save(path)
    assert ProfileTable.load(path).step == table.step
    doc = json.loads(path.read_text())
    doc["step"]["fsdp_round_msec"] = doc["step"].pop("fsdp_round_ms")
    with pytest.raises(ProfileTableError, match="unknown field 'fsdp_round_msec' in 'step'"):
        ProfileTable.from_dict(doc, source="t.json")
    doc["step"] = {"optimizer_ms": -1.0, "fsdp_round_ms": 1.0, "replica_reduction_ms": 1.0}
    with pytest.raises(ProfileTableError, match="step.optimizer_ms"):
        ProfileTable.from_dict(doc, source="t.json")
    del doc["step"]
    assert CostModel(ProfileTable.from_dict(doc, source="t.json")).step is None


def test_a_round_lasts_at_least_its_parameter_traffic_and_replicas_reduce_once() -> None:
    cost = CostModel(dataclasses.replace(preset_table("cpu-tiny", shard_ranks=4),
                                         step=StepFigures(optimizer_ms=2.0, fsdp_round_ms=5.0,
                                                          replica_reduction_ms=7.0)))
    plan = _plan([1.0, 9.0])
    assert fsdp_step_ms(plan, cost) == pytest.approx(5.0 + 9.0 + 2.0)
    assert replicas_step_ms(plan.predicted_ms, cost) == pytest.approx(10.0 + 7.0 + 2.0)
    # Bounds: a step has at least one round's traffic, or one reduction, and always the optimizer step.
    assert step_lower_bound_ms(1.0, cost, LOCKSTEP) == pytest.approx(5.0 + 2.0)
    assert step_lower_bound_ms(8.0, cost, LOCKSTEP) == pytest.approx(8.0 + 2.0)
    assert step_lower_bound_ms(8.0, cost, INDEPENDENT) == pytest.approx(8.0 + 7.0 + 2.0)
    unpriced = CostModel(dataclasses.replace(cost.table, step=None))
    assert fsdp_step_ms(plan, unpriced) == replicas_step_ms(10.0, unpriced) == 10.0


def test_traffic_the_pass_does_not_hide_adds_to_the_round() -> None:
    def step(overlap: float) -> StepFigures:
        return StepFigures(optimizer_ms=2.0, fsdp_round_ms=5.0, replica_reduction_ms=7.0, fsdp_overlap=overlap)

    # round = max(pass, traffic) + (1 - overlap) min(pass, traffic)
    assert step(1.0).lockstep_round_ms(9.0) == 9.0 and step(1.0).lockstep_round_ms(1.0) == 5.0
    assert step(0.0).lockstep_round_ms(9.0) == 14.0 and step(0.0).lockstep_round_ms(1.0) == 6.0
    assert step(0.25).lockstep_round_ms(9.0) == pytest.approx(9.0 + 0.75 * 5.0)
    cost = CostModel(dataclasses.replace(preset_table("cpu-tiny", shard_ranks=4), step=step(0.5)))
    plan = _plan([1.0, 9.0])
    assert fsdp_step_ms(plan, cost) == pytest.approx((5.0 + 0.5) + (9.0 + 2.5) + 2.0)
    # The bound: one round of all the work, which more rounds only lengthen.
    assert step_lower_bound_ms(10.0, cost, LOCKSTEP) == pytest.approx(10.0 + 2.5 + 2.0)
    assert step_lower_bound_ms(10.0, cost, LOCKSTEP) <= fsdp_step_ms(plan, cost)
    # The planner counts rounds the same way.
    assert round_floor(cost, LOCKSTEP).round_ms(9.0) == pytest.approx(11.5)
    assert round_floor(cost, INDEPENDENT).round_ms(9.0) == 9.0 and round_floor(cost, INDEPENDENT).traffic_ms == 0.0


def test_the_overlap_is_optional_and_checked(tmp_path) -> None:
    table = preset_table("cpu-tiny", shard_ranks=4)
    assert table.step.fsdp_overlap == 1.0 and "fsdp_overlap" not in table.to_dict()["step"]
    partial = dataclasses.replace(table, step=dataclasses.replace(table.step, fsdp_overlap=0.3))
    path = tmp_path / "t.json"
    partial.save(path)
    assert ProfileTable.load(path).step.fsdp_overlap == 0.3
    doc = json.loads(path.read_text())
    doc["step"]["fsdp_overlap"] = 1.5
    with pytest.raises(ProfileTableError, match=r"step.fsdp_overlap.*a number in \[0, 1\]"):
        ProfileTable.from_dict(doc, source="t.json")


def test_without_a_step_wide_collective_a_group_waits_only_for_its_own_members() -> None:
    def group(ranks, ms):
        return GroupPlan(ranks=ranks, degree=len(ranks), algo="ring", samples=(0,), predicted_ms=ms)

    # Round 1: ranks 0-1 take 10 ms, rank 2 takes 2, rank 3 takes 3; round 2: (0) 1 ms, (1) 1 ms, (2, 3) 4 ms.
    rounds = (RoundPlan((group((0, 1), 10.0), group((2,), 2.0), group((3,), 3.0)), 10.0),
              RoundPlan((group((0,), 1.0), group((1,), 1.0), group((2, 3), 4.0)), 4.0))
    plan = Plan(rounds=rounds, predicted_ms=14.0, lower_bound_ms=1.0, solver_ms=0.0, num_ranks=4)
    # Ranks 2-3 start round 2 at 3 ms (rank 3's end), not at 10: they finish at 7; ranks 0-1 at 11.
    assert dataflow_ms(plan) == pytest.approx(11.0)
    assert dataflow_ms(plan) < plan.predicted_ms


@pytest.mark.parametrize("overlap", [1.0, 0.0])
def test_under_fsdp_the_planner_counts_every_round_at_least_its_parameter_traffic(overlap: float):
    """With a floor per round (FSDP's all-gathers and reduce-scatter), fewer, fuller rounds can be faster than
    more, shorter ones: the planner compares round counts on the floored time, never doing worse."""
    base = a3_scenario(shard_ranks=4, max_tokens_per_rank=4000)
    no_step = CostModel(dataclasses.replace(base.table, step=None), max_tokens_per_rank=4000)
    rng = np.random.default_rng(0)
    fewer = 0
    for _ in range(20):
        lengths = rng.integers(200, 12000, size=int(rng.integers(3, 30))).tolist()
        config = SolverConfig(4, ranks_per_node=8)
        unfloored = plan_batch(lengths, no_step, config)
        floor = 3 * unfloored.predicted_ms / unfloored.num_rounds
        floored_cost = CostModel(dataclasses.replace(base.table, step=StepFigures(
            optimizer_ms=0.0, fsdp_round_ms=floor, replica_reduction_ms=0.0, fsdp_overlap=overlap)),
            max_tokens_per_rank=4000)
        plan = plan_batch(lengths, floored_cost, config)
        assert fsdp_step_ms(plan, floored_cost) <= fsdp_step_ms(unfloored, floored_cost) * (1 + 1e-9)
        fewer += plan.num_rounds < unfloored.num_rounds
    assert fewer >= 3
