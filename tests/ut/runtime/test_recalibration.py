"""Recalibration in training: which factors each step is planned with, what a step's group times teach,
and how a group's time is read from its ranks' round times."""
from __future__ import annotations

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.calibration import CalibratedCostModel, CalibrationSettings
from mindspeed_mm.core.fcp.runtime.recalibration import (
    PLAN_LAG,
    StepRecalibrator,
    mean_absolute_error,
    measured_group_times,
)
from mindspeed_mm.core.fcp.solver import GroupPlan, Plan, RoundPlan, SolverConfig
from mindspeed_mm.core.fcp.solver.planner import plan_batch

LENGTHS = [300, 120, 80, 64, 40, 200, 150, 30]


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return CostModel.from_preset("cpu-tiny", max_tokens_per_rank=160)


def _plan(cost: CostModel) -> Plan:
    return plan_batch(LENGTHS, cost, SolverConfig(num_ranks=4, ranks_per_node=4))


def _scaled_times(plan: Plan, cost: CostModel, lengths: list[int], scale: dict[int, float]) -> list[list[float]]:
    """Each group's uncorrected predicted time times `scale[degree]`: a machine `scale` times slower."""
    return [
        [float(cost.group_time_ms(cost.workload([lengths[s] for s in g.samples]), g.degree, g.algo)) * scale[g.degree]
         for g in r.groups]
        for r in plan.rounds
    ]


def test_the_first_steps_are_planned_uncorrected_and_later_ones_lag_by_two(cost: CostModel) -> None:
    recalibrator = StepRecalibrator(cost)
    for step in range(PLAN_LAG):
        assert recalibrator.corrections_for_step(step).is_identity
        assert recalibrator.cost_for_step(step) is cost
    with pytest.raises(RuntimeError, match="plan of step 3 needs the measured group times of step 1"):
        recalibrator.corrections_for_step(2)


def test_the_step_planned_while_a_step_runs_does_not_see_its_times(cost: CostModel) -> None:
    # Step 1 is planned in the background while step 0 trains, so it must not depend on step 0's times
    # (else the plans would differ between the look-ahead and the synchronous planner); step 2 uses them.
    recalibrator = StepRecalibrator(cost, CalibrationSettings(smoothing=1.0), warmup_steps=0)
    plan = _plan(cost)
    recalibrator.record_step(0, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, dict.fromkeys(range(1, 5), 3.0)))
    assert recalibrator.corrections_for_step(1).is_identity
    assert recalibrator.cost_for_step(1) is cost
    assert recalibrator.corrections_for_step(2).default == pytest.approx(3.0)


def test_a_slower_machine_is_learned_and_later_plans_predict_it(cost: CostModel) -> None:
    recalibrator = StepRecalibrator(cost, CalibrationSettings(smoothing=1.0), warmup_steps=0)
    plan = _plan(cost)
    scale = {d: 2.0 + 0.5 * d for d in range(1, 5)}
    records = recalibrator.record_step(0, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, scale))
    assert len(records) == sum(len(r.groups) for r in plan.rounds)
    assert mean_absolute_error(records) > 0.5  # the uncorrected model was far off

    corrected = recalibrator.cost_for_step(PLAN_LAG)
    assert isinstance(corrected, CalibratedCostModel)
    replanned = plan_batch(LENGTHS, corrected, SolverConfig(num_ranks=4, ranks_per_node=4))
    measured = _scaled_times(replanned, cost, LENGTHS, scale)
    # Every (degree, algo) the first plan used is now predicted exactly (smoothing 1 keeps the latest ratio).
    seen = {(g.degree, g.algo) for r in plan.rounds for g in r.groups}
    checked = 0
    for round_plan, times in zip(replanned.rounds, measured):
        for group, time_ms in zip(round_plan.groups, times):
            if (group.degree, group.algo) in seen:
                assert group.predicted_ms == pytest.approx(time_ms, rel=1e-9)
                checked += 1
    assert checked
    # Step 0's factors are the slowdowns of its keys; step PLAN_LAG + 1 needs step 1, not yet recorded.
    factors = recalibrator.corrections_for_step(PLAN_LAG)
    assert {key: factors.factor(*key) for key in seen} == pytest.approx({(d, a): scale[d] for d, a in seen})
    with pytest.raises(RuntimeError, match="step 2"):
        recalibrator.corrections_for_step(PLAN_LAG + 1)

    # Once steps 0 and 1 are recorded, step 2's records separate the plan's (corrected) prediction from
    # the base model's: the corrected one is exact on the keys step 0 taught, the base one stays far off.
    recalibrator.record_step(1, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, scale))
    later = recalibrator.record_step(PLAN_LAG, replanned, LENGTHS, None, measured)
    assert mean_absolute_error(later, uncorrected=True) > 0.5
    taught = [r for r in later if (r.degree, r.algo) in seen]
    assert taught
    for record in taught:
        assert record.predicted_ms == pytest.approx(record.measured_ms, rel=1e-9)
        assert record.base_ms == pytest.approx(record.measured_ms / scale[record.degree], rel=1e-9)
    assert mean_absolute_error(later) < mean_absolute_error(later, uncorrected=True)


def test_corrections_of_a_step_do_not_change_once_recorded(cost: CostModel) -> None:
    recalibrator = StepRecalibrator(cost, warmup_steps=0)
    plan = _plan(cost)
    recalibrator.record_step(0, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, dict.fromkeys(range(1, 5), 3.0)))
    first = recalibrator.corrections_for_step(2)
    recalibrator.record_step(1, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, dict.fromkeys(range(1, 5), 1.0)))
    assert recalibrator.corrections_for_step(2) == first
    assert recalibrator.corrections_for_step(3).default < first.default


def test_measured_times_must_match_the_plan_groups(cost: CostModel) -> None:
    recalibrator = StepRecalibrator(cost)
    plan = _plan(cost)
    times = _scaled_times(plan, cost, LENGTHS, dict.fromkeys(range(1, 5), 1.0))
    with pytest.raises(ValueError, match="step 1: measured times per round"):
        recalibrator.record_step(0, plan, LENGTHS, None, times[:-1])
    with pytest.raises(ValueError, match="measured_ms must be a finite time > 0"):
        recalibrator.record_step(0, plan, LENGTHS, None, [[0.0] * len(t) for t in times])


def test_a_group_time_is_its_last_arriving_rank_time() -> None:
    plan = Plan(
        rounds=(
            RoundPlan(groups=(GroupPlan(ranks=(0, 1, 2), degree=3, algo="ring", samples=(0,), predicted_ms=1.0),
                              GroupPlan(ranks=(3,), degree=1, algo="ring", samples=(1,), predicted_ms=1.0)),
                      predicted_ms=1.0),
            RoundPlan(groups=(GroupPlan(ranks=(0, 1), degree=2, algo="ulysses", samples=(2,), predicted_ms=1.0),
                              GroupPlan(ranks=(2, 3), degree=2, algo="ring", samples=(3,), predicted_ms=1.0)),
                      predicted_ms=1.0),
        ),
        predicted_ms=2.0, lower_bound_ms=1.0, solver_ms=0.1, num_ranks=4,
    )
    # [world, rounds]: rank 3 finished round 0 early and waited for ranks 2 in round 1.
    rank_round_ms = np.array([[10.0, 7.0], [11.0, 6.0], [12.0, 9.0], [4.0, 15.0]])
    assert measured_group_times(plan, rank_round_ms) == [[10.0, 4.0], [6.0, 9.0]]


def test_warm_up_steps_are_logged_but_not_learned(cost: CostModel) -> None:
    recalibrator = StepRecalibrator(cost, CalibrationSettings(smoothing=1.0))
    assert recalibrator.warmup_steps == 1
    plan = _plan(cost)
    first = recalibrator.record_step(0, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, dict.fromkeys(range(1, 5), 9.0)))
    assert mean_absolute_error(first) == pytest.approx(8 / 9)
    assert recalibrator.corrections_for_step(2).is_identity and recalibrator.calibrator.observations == 0
    recalibrator.record_step(1, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, dict.fromkeys(range(1, 5), 2.0)))
    assert recalibrator.corrections_for_step(3).default == pytest.approx(2.0)
    with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
        StepRecalibrator(cost, warmup_steps=-1)


def test_idle_ranks_teach_nothing(cost: CostModel) -> None:
    """A round whose ranks sit out (IDLE groups, 0 ms predicted) is recorded from its real groups only."""
    recalibrator = StepRecalibrator(cost, CalibrationSettings(smoothing=1.0), warmup_steps=0)
    layout = (
        (((0, 1), "ring", (0,)), ((2,), "ring", (1,)), ((3,), "idle", ())),
        (((0, 1), "ring", (5,)), ((2,), "ring", (2, 3)), ((3,), "ring", (4,))),
        (((0,), "ring", (6,)), ((1,), "ring", (7,)), ((2,), "idle", ()), ((3,), "idle", ())),
    )

    def predicted(ranks, algo, samples):
        if algo == "idle":
            return 0.0
        return float(cost.group_time_ms(cost.workload([LENGTHS[s] for s in samples]), len(ranks), algo))

    rounds = tuple(RoundPlan(tuple(GroupPlan(ranks, len(ranks), algo, samples, predicted(ranks, algo, samples))
                                   for ranks, algo, samples in groups),
                             max(predicted(*g) for g in groups)) for groups in layout)
    plan = Plan(rounds=rounds, predicted_ms=sum(r.predicted_ms for r in rounds), lower_bound_ms=0.0,
                solver_ms=0.0, num_ranks=4)
    times = [[0.5 if g.algo == "idle" else 3.0 * g.predicted_ms for g in r.groups] for r in rounds]
    records = recalibrator.record_step(0, plan, LENGTHS, None, times)
    assert len(records) == 7
    factors = recalibrator.corrections_for_step(PLAN_LAG)
    assert (factors.factor(1, "ring"), factors.factor(2, "ring")) == pytest.approx((3.0, 3.0))


def test_a_resumed_recalibrator_plans_the_next_steps_as_the_uninterrupted_one(cost: CostModel) -> None:
    import json

    running = StepRecalibrator(cost)
    for step in range(5):
        plan = plan_batch(LENGTHS, running.cost_for_step(step), SolverConfig(num_ranks=4, ranks_per_node=4))
        running.record_step(step, plan, LENGTHS, None, _scaled_times(plan, cost, LENGTHS, {1: 1.5 + step / 10,
                                                                                         2: 3.0, 3: 3.0, 4: 3.0}))
    saved = json.loads(json.dumps(running.to_json()))  # through a file, as a checkpoint keeps it
    resumed = StepRecalibrator(cost)
    assert not resumed.can_plan(5) and running.can_plan(5) and running.can_plan(6) and not running.can_plan(7)
    resumed.restore(saved)
    for step in (5, 6):
        assert resumed.corrections_for_step(step) == running.corrections_for_step(step)
        mine = plan_batch(LENGTHS, resumed.cost_for_step(step), SolverConfig(num_ranks=4, ranks_per_node=4))
        theirs = plan_batch(LENGTHS, running.cost_for_step(step), SolverConfig(num_ranks=4, ranks_per_node=4))
        assert mine.digest() == theirs.digest()
    assert resumed.calibrator.to_json() == running.calibrator.to_json()
    with pytest.raises(ValueError, match="fcp_recalibration_smoothing"):
        StepRecalibrator(cost, CalibrationSettings(smoothing=0.9)).restore(saved)
    with pytest.raises(ValueError, match="FCP calibration state: missing or malformed field"):
        StepRecalibrator(cost).restore({"calibrator": saved["calibrator"]})
