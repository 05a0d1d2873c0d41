"""The per-step plan source of both training paths: `fcp train` and MindSpeed-MM's (`FCPOptions.plan_source`).

Steps are asked for by their index, in order. It plans from the global batches' token lengths (and
vision-encoder patches), one step ahead with look-ahead planning (`AsyncPlanner`). With a
`StepRecalibrator`, the measured group times of a step come back through `record_measured(step, ...)` and
later plans use the corrected cost model. `check(plan, step)` is the check every rank runs before a step:
the same plan everywhere (digest all-gather), and one that fits the batch, the ranks and the cost model.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost.calibration import CorrectionTable, Observation
from mindspeed_mm.core.fcp.runtime.look_ahead import AsyncPlanner, PlannedStep
from mindspeed_mm.core.fcp.runtime.batch_planner import BatchPlanner
from mindspeed_mm.core.fcp.runtime.recalibration import StepRecalibrator, calibration_line
from mindspeed_mm.core.fcp.runtime.plan_check import check_plan_agreement, check_plan_executable
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.solver import Plan
from mindspeed_mm.core.fcp.solver.step_time import step_ms

_logger = logging.getLogger(__name__)


class StepPlanSource:
    """The plans of the run's steps (in order) from the global batches' token lengths; one step ahead with
    `async_planning` (once the step's inputs are known: `can_plan`). With a recalibrator,
    `record_measured(step, ...)` takes a step's measured group times and later plans use the corrected cost model.
    With `log_plan`, every plan handed out and every step's calibration is logged on `logger`.
    """

    def __init__(
        self,
        planner: BatchPlanner,
        batch_lengths: Callable[[int], Sequence[int]],
        steps: RunSteps,
        *,
        async_planning: bool,
        log_plan: bool = False,
        recalibrator: StepRecalibrator | None = None,
        batch_patches: Callable[[int], Sequence[int] | None] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.planner = planner
        self.batch_lengths = batch_lengths
        self.batch_patches = batch_patches
        """Step -> the vision-encoder patches of its samples (None: no vision encoder)."""
        self.log_plan = log_plan
        self.recalibrator = recalibrator
        self.logger = logger or _logger
        self.steps = steps
        self._planner = AsyncPlanner(self._plan, steps, look_ahead=async_planning, ready=self.can_plan)
        self._handed: dict[int, Plan] = {}
        """Plans handed out and not yet measured (recalibration reads each step's plan back)."""

    def patches(self, step: int) -> Sequence[int] | None:
        """The vision-encoder patches of the samples of `step` (None without a vision encoder)."""
        return None if self.batch_patches is None else self.batch_patches(step)

    def _plan(self, step: int) -> Plan:
        planner = self.planner
        if self.recalibrator is not None:
            planner = dataclasses.replace(planner, cost=self.recalibrator.cost_for_step(step))
        return planner.plan(self.batch_lengths(step), self.patches(step))

    def can_plan(self, step: int) -> bool:
        """Whether `step` is one of the run's and can be planned now (with recalibration: the times it is planned
        with are known)."""
        if step not in self.steps:
            return False
        return self.recalibrator is None or self.recalibrator.can_plan(step)

    @property
    def wants_measurements(self) -> bool:
        """Whether the driver should time the groups (only to recalibrate)."""
        return self.recalibrator is not None

    def corrections_for_step(self, step: int) -> CorrectionTable | None:
        """The correction factors step `step` (zero-based) is planned with; None without recalibration.

        Ask before that step's `record_measured`: older tables are dropped as new steps are recorded."""
        return None if self.recalibrator is None else self.recalibrator.corrections_for_step(step)

    def learned_factors(self) -> CorrectionTable | None:
        """The correction factors learned so far; None without recalibration."""
        return None if self.recalibrator is None else self.recalibrator.calibrator.snapshot()

    def plan(self, step: int) -> PlannedStep:
        """The plan of `step` (zero-based; steps are asked for in order) and how long the caller waited."""
        planned = self._planner.get(step)
        if self.recalibrator is not None:
            self._handed[step] = planned.plan
        if self.log_plan:
            plan = planned.plan
            self.logger.info(
                "FCP plan of step %d: %d rounds, degrees %s, predicted %.1f ms (lower bound %.1f ms), waited %.1f ms; "
                "predicted step with its own costs %.1f ms, algos %s",
                step + 1, plan.num_rounds, [[g.degree for g in r.groups] for r in plan.rounds],
                plan.predicted_ms, plan.lower_bound_ms, planned.wait_ms,
                step_ms(plan, self.planner.cost, self.planner.solver_config.step_semantics),
                json.dumps([[g.algo_label for g in r.groups] for r in plan.rounds]),
            )
        return planned

    def check(self, plan: Plan, step: int, *, device: torch.device | None = None,
              group: dist.ProcessGroup | None = None) -> None:
        """The check every rank runs (collectively, over `group`) before `step`: all hold the same plan, and
        it covers the ranks, places every sample once and fits the cost model (raises naming the step)."""
        check_plan_agreement(plan, step, group=group, device=device)
        check_plan_executable(plan, step, self.planner.solver_config.num_ranks, self.batch_lengths(step),
                              self.planner.cost, self.patches(step))

    def record_measured(self, step: int, measured_group_ms: Sequence[Sequence[float]]) -> list[Observation] | None:
        """Feeds the measured group times of `step`'s plan to the recalibrator.

        Returns one record per group (uncorrected and used prediction, measured time); None without one."""
        if self.recalibrator is None:
            return None
        plan = self._handed.pop(step, None)
        if plan is None:
            raise RuntimeError(f"record_measured: no plan of step {step + 1} was handed out")
        observations = self.recalibrator.record_step(
            step, plan, self.batch_lengths(step), self.patches(step), measured_group_ms
        )
        if self.log_plan:
            self.logger.info(calibration_line(step + 1, observations, self.recalibrator.calibrator.snapshot()))
        self._planner.refresh()
        return observations

    def close(self) -> None:
        """Stops background planning."""
        self._planner.close()

    def __enter__(self) -> "StepPlanSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
