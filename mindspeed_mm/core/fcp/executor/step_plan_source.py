"""The per-step plan source of every FCP training path: `fcp train`, the Megatron-core and the MindSpeed-MM runs.

It plans step after step from the global batches' token lengths (and vision-encoder patches), one step
ahead with look-ahead planning (`AsyncPlanner`). With a `StepRecalibrator`, the measured group times of
each step come back through `record_measured`, and later plans use the corrected cost model.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from mindspeed_mm.core.fcp.cost.calibration import CorrectionTable, Observation
from mindspeed_mm.core.fcp.executor.async_planner import AsyncPlanner, PlannedStep
from mindspeed_mm.core.fcp.executor.log_format import calibration_line
from mindspeed_mm.core.fcp.executor.planning import BatchPlanner
from mindspeed_mm.core.fcp.executor.recalibration import StepRecalibrator
from mindspeed_mm.core.fcp.solver import Plan

_logger = logging.getLogger(__name__)


class StepPlanSource:
    """Plans step after step from the global batches' token lengths, one step ahead with `async_planning`.

    Call it once per training step (`next_step` also tells how long the caller waited); it returns that
    step's plan. With a recalibrator, `record_measured` takes the step's measured group times and the
    plans of later steps use the corrected cost model. With `log_plan`, every plan handed out and every
    step's calibration is logged on `logger`.
    """

    def __init__(
        self,
        planner: BatchPlanner,
        batch_lengths: Callable[[int], Sequence[int]],
        num_steps: int,
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
        self._planner = AsyncPlanner(self._plan, num_steps, look_ahead=async_planning)
        self._step = 0
        self._last_plan: Plan | None = None

    def _patches(self, step: int) -> Sequence[int] | None:
        return None if self.batch_patches is None else self.batch_patches(step)

    def _plan(self, step: int) -> Plan:
        planner = self.planner
        if self.recalibrator is not None:
            planner = dataclasses.replace(planner, cost=self.recalibrator.cost_for_step(step))
        return planner.plan(self.batch_lengths(step), self._patches(step))

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

    def record_measured(self, measured_group_ms: Sequence[Sequence[float]]) -> list[Observation] | None:
        """Feeds the measured group times of the plan handed out last to the recalibrator.

        Returns one record per group (uncorrected and used prediction, measured time); None without one."""
        if self.recalibrator is None:
            return None
        if self._last_plan is None:
            raise RuntimeError("record_measured called before any plan was handed out")
        step = self._step - 1
        observations = self.recalibrator.record_step(
            step, self._last_plan, self.batch_lengths(step), self._patches(step), measured_group_ms
        )
        if self.log_plan:
            self.logger.info(calibration_line(step + 1, observations, self.recalibrator.calibrator.snapshot()))
        return observations

    def next_step(self) -> PlannedStep:
        """The next step's plan and how long the caller waited for it."""
        planned = self._planner.get(self._step)
        self._step += 1
        self._last_plan = planned.plan
        if self.log_plan:
            plan = planned.plan
            self.logger.info(
                "FCP plan of step %d: %d rounds, degrees %s, predicted %.1f ms (lower bound %.1f ms), waited %.1f ms",
                planned.step + 1, plan.num_rounds, [[g.degree for g in r.groups] for r in plan.rounds],
                plan.predicted_ms, plan.lower_bound_ms, planned.wait_ms,
            )
        return planned

    def __call__(self) -> Plan:
        return self.next_step().plan

    def close(self) -> None:
        """Stops background planning."""
        self._planner.close()

    def __enter__(self) -> "StepPlanSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
