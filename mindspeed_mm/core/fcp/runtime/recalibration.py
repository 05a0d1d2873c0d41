"""Online recalibration in training: measured group times correct the cost model of later plans.

After each step every rank knows (from one all-reduce) how long each group of the plan took. These
times feed an `OnlineCalibrator` (per degree / algo factors, smoothed); the plan of step s uses the
factors learned from the steps up to s - `PLAN_LAG`. With look-ahead planning, step s is planned in
the background while step s - 1 runs, so s - 2 is the newest step whose times are known by then; the
synchronous planner uses the same lag, so a plan never depends on the planning mode. All ranks feed
the same observations in the same order, so they plan with the same factors and the same plans.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.calibration import (
    CalibratedCostModel,
    CalibrationSettings,
    CorrectionTable,
    Observation,
    OnlineCalibrator,
    observe_groups,
)
from mindspeed_mm.core.fcp.solver import Plan
from mindspeed_mm.core.fcp.solver.placement import placed_node_part
from mindspeed_mm.core.fcp.solver.plan import IDLE

PLAN_LAG = 2
"""The plan of step s uses the measured times of steps up to s - PLAN_LAG."""
WARMUP_STEPS = 1
"""Steps whose times are logged but not learned from: the first step also pays one-off costs
(allocator growth, first calls of every kernel and collective)."""


class StepRecalibrator:
    """The correction factors of each step's plan, learned from the groups of the earlier steps."""

    def __init__(self, base: CostModel, settings: CalibrationSettings = CalibrationSettings(),
                 warmup_steps: int = WARMUP_STEPS) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.base = base
        """The uncorrected cost model (preset or profiled table)."""
        self.warmup_steps = warmup_steps
        """The first steps, whose times are not learned from."""
        self.calibrator = OnlineCalibrator(settings)
        # Per recorded step: the factors learned up to it and the cost model they make (built once).
        self._after_step: dict[int, tuple[CorrectionTable, CostModel]] = {}
        # The planning thread reads the tables while the training thread records new ones.
        self._lock = threading.Lock()

    def can_plan(self, step: int) -> bool:
        """Whether the times step `step` is planned with are known (recorded, or none needed)."""
        source = step - PLAN_LAG
        with self._lock:
            return source < 0 or source in self._after_step

    def to_json(self) -> dict[str, Any]:
        """What a resumed run needs to plan exactly as this one would: the calibrator's state and the tables of
        the newest recorded steps (the plans of the next `PLAN_LAG` steps read them)."""
        with self._lock:
            tables = {str(step): table.to_json() for step, (table, _) in sorted(self._after_step.items())}
        return {"calibrator": self.calibrator.to_json(), "after_step": tables}

    def restore(self, doc: Mapping[str, Any]) -> None:
        """Continues from `to_json`'s document (a resumed run); a wrong document raises ValueError naming it."""
        try:
            calibrator = OnlineCalibrator.from_json(doc["calibrator"])
            tables = {int(step): CorrectionTable.from_json(table) for step, table in doc["after_step"].items()}
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"FCP calibration state: missing or malformed field ({error})") from None
        if calibrator.settings != self.calibrator.settings:
            raise ValueError(f"FCP calibration state was learned with {calibrator.settings}, this run uses "
                             f"{self.calibrator.settings} (fcp_recalibration_smoothing)")
        with self._lock:
            self.calibrator = calibrator
            self._after_step = {step: (table, self.base if table.is_identity
                                       else CalibratedCostModel.calibrated(self.base, table))
                                for step, table in tables.items()}

    def corrections_for_step(self, step: int) -> CorrectionTable:
        """The factors step `step` (zero-based) is planned with; raises if its source step was not recorded."""
        return self._planned_with(step)[0]

    def cost_for_step(self, step: int) -> CostModel:
        """The cost model step `step` is planned with: the base model times the step's factors."""
        return self._planned_with(step)[1]

    def _planned_with(self, step: int) -> tuple[CorrectionTable, CostModel]:
        source = step - PLAN_LAG
        if source < 0:
            return CorrectionTable(), self.base
        with self._lock:
            found = self._after_step.get(source)
        if found is None:
            raise RuntimeError(
                f"the plan of step {step + 1} needs the measured group times of step {source + 1}, "
                "which were not recorded (record_step must run after every step, in order)"
            )
        return found

    def record_step(
        self,
        step: int,
        plan: Plan,
        lengths: Sequence[int],
        patches: Sequence[int] | None,
        measured_group_ms: Sequence[Sequence[float]],
    ) -> list[Observation]:
        """Feeds the measured time of every group of step `step` (one list per round, in plan order).

        Returns one plan-log record per group that ran (idle ranks learn nothing): uncorrected and used
        prediction, and the measured time.
        """
        if len(measured_group_ms) != plan.num_rounds or any(
            len(times) != len(round_plan.groups) for times, round_plan in zip(measured_group_ms, plan.rounds)
        ):
            raise ValueError(
                f"step {step + 1}: measured times per round {[len(t) for t in measured_group_ms]} do not match "
                f"the plan's groups per round {[len(r.groups) for r in plan.rounds]}"
            )
        cost = self.cost_for_step(step)
        node = int(plan.extras.get("ranks_per_node", cost.ranks_per_node))
        groups, measured, placements = [], [], []
        for round_plan, times in zip(plan.rounds, measured_group_ms):
            for group, group_ms in zip(round_plan.groups, times):
                if group.algo == IDLE:
                    continue
                measured.append(group_ms)
                workload = cost.workload(
                    [int(lengths[s]) for s in group.samples],
                    None if patches is None else [int(patches[s]) for s in group.samples],
                )
                groups.append((workload, group.degree, group.algo))
                # Priced where it ran: a group across a node boundary (or a hybrid split) is not the compact one.
                placements.append((placed_node_part(group.ranks[0], group.degree, node),
                                   None if group.hybrid is None else group.hybrid.ulysses_degree))
        # A warm-up step's records come from a scratch calibrator: logged, not learned.
        learner = self.calibrator if step >= self.warmup_steps else OnlineCalibrator(self.calibrator.settings)
        records = observe_groups(learner, cost, groups, measured, placements)
        table = self.calibrator.snapshot()
        learned = self.base if table.is_identity else CalibratedCostModel.calibrated(self.base, table)
        with self._lock:
            self._after_step[step] = (table, learned)
            # Only the newest PLAN_LAG tables can still be asked for.
            for old in [s for s in self._after_step if s <= step - PLAN_LAG]:
                del self._after_step[old]
        return records


def measured_group_times(plan: Plan, rank_round_ms: np.ndarray) -> list[list[float]]:
    """Each group's time in each round, from every rank's time in every round (`[world, rounds]`).

    A group's time is the smallest of its ranks' times: ranks arrive from the previous round at
    different moments, and the early ones then wait in the group's first collective, so the rank
    that arrived last measures the group's own duration.
    """
    return [
        [float(rank_round_ms[list(group.ranks), index].min()) for group in round_plan.groups]
        for index, round_plan in enumerate(plan.rounds)
    ]


def mean_absolute_error(records: Sequence[Observation], *, uncorrected: bool = False) -> float:
    """Mean |predicted - measured| / measured of the records, as a fraction; with `uncorrected`, of the
    base model's predictions instead of the corrected ones the plans used."""
    if not records:
        raise ValueError("no records")
    return sum(abs((r.base_ms if uncorrected else r.predicted_ms) - r.measured_ms) / r.measured_ms
               for r in records) / len(records)


def calibration_line(iteration: int, observations: Sequence[Observation], factors: CorrectionTable) -> str:
    """How far the step's group times were from the plan's predictions, and the factors learned so far."""
    learned = " ".join(f"{d}x{a} {f:.2f}" for (d, a), f in sorted(factors.factors.items()))
    return (
        f"calibration iteration {iteration} | groups: {len(observations)} |"
        f" mean group time error: {100 * mean_absolute_error(observations):.1f}%"
        f" (uncorrected model {100 * mean_absolute_error(observations, uncorrected=True):.1f}%) |"
        f" factors: {learned or '-'} (other keys {factors.default:.2f})"
    )
