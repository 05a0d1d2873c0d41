"""The planner and per-step plan source of a Megatron run, built from the `--fcp-*` options.

The data loader knows the token lengths of each global batch before the step runs; it registers a
plan source built here with `get_fcp_runtime().set_plan_source(...)`, and the FCP forward-backward
driver then takes one plan per step from it. With --fcp-recalibrate the driver hands the measured
group times of each step back, and later plans use the corrected cost model.
"""
from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

import dataclasses

from mindspeed_mm.core.fcp.cost import ALGOS, CostModel
from mindspeed_mm.core.fcp.cost.builder import build_cost_model
from mindspeed_mm.core.fcp.cost.calibration import CalibrationSettings
from mindspeed_mm.core.fcp.executor.async_planner import AsyncPlanner
from mindspeed_mm.core.fcp.executor.log_format import calibration_line
from mindspeed_mm.core.fcp.executor.planning import BatchPlanner
from mindspeed_mm.core.fcp.executor.recalibration import StepRecalibrator
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig

logger = logging.getLogger(__name__)


def cost_model_from_args(args: argparse.Namespace, num_fcp_ranks: int | None = None) -> CostModel:
    """The cost model of --fcp-profile-table (or --fcp-preset at the run's TP/PP, its state sharded over the
    `num_fcp_ranks` ranks of a DP x CP plane), --fcp-max-tokens-per-rank, --fcp-ranks-per-node and
    --fcp-attention-algo."""
    return build_cost_model(
        preset=args.fcp_preset, profile_table=args.fcp_profile_table,
        max_tokens_per_rank=args.fcp_max_tokens_per_rank,
        algos=ALGOS if args.fcp_attention_algo == "auto" else (args.fcp_attention_algo,),
        shard_ranks=num_fcp_ranks, ranks_per_node=args.fcp_ranks_per_node,
        tp=getattr(args, "tensor_model_parallel_size", 1), pp=getattr(args, "pipeline_model_parallel_size", 1),
    )


def planner_from_args(args: argparse.Namespace, num_fcp_ranks: int) -> BatchPlanner:
    """The FCP planner of a run whose DP x CP planes hold `num_fcp_ranks` ranks."""
    cost = cost_model_from_args(args, num_fcp_ranks)
    solver = SolverConfig(
        num_ranks=num_fcp_ranks,
        ranks_per_node=args.fcp_ranks_per_node or cost.ranks_per_node,
        max_degree=args.fcp_max_degree,
    )
    return BatchPlanner(cost=cost, solver_config=solver, static_cp_degree=None)


class StepPlanSource:
    """Plans step after step from the global batches' token lengths, one step ahead with --fcp-async-planning.

    Call it once per training step (the FCP driver does); it returns that step's plan. With a
    recalibrator, `record_measured` takes the step's measured group times (the driver passes them)
    and the plans of later steps use the corrected cost model.
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
    ) -> None:
        self.planner = planner
        self.batch_lengths = batch_lengths
        self.log_plan = log_plan
        self.recalibrator = recalibrator
        self._planner = AsyncPlanner(self._plan, num_steps, look_ahead=async_planning)
        self._step = 0
        self._last_plan: Plan | None = None

    def _plan(self, step: int) -> Plan:
        planner = self.planner
        if self.recalibrator is not None:
            planner = dataclasses.replace(planner, cost=self.recalibrator.cost_for_step(step))
        return planner.plan(self.batch_lengths(step))

    @property
    def wants_measurements(self) -> bool:
        """Whether the driver should time the groups (only to recalibrate)."""
        return self.recalibrator is not None

    def record_measured(self, measured_group_ms: list[list[float]]) -> None:
        """Feeds the measured group times of the plan handed out last to the recalibrator."""
        if self.recalibrator is None:
            return
        if self._last_plan is None:
            raise RuntimeError("record_measured called before any plan was handed out")
        step = self._step - 1
        observations = self.recalibrator.record_step(
            step, self._last_plan, self.batch_lengths(step), None, measured_group_ms
        )
        if self.log_plan:
            logger.info(calibration_line(step + 1, observations, self.recalibrator.calibrator.snapshot()))

    def __call__(self) -> Plan:
        planned = self._planner.get(self._step)
        self._step += 1
        self._last_plan = planned.plan
        if self.log_plan:
            plan = planned.plan
            logger.info(
                "FCP plan of step %d: %d rounds, degrees %s, predicted %.1f ms (lower bound %.1f ms), waited %.1f ms",
                planned.step + 1, plan.num_rounds, [[g.degree for g in r.groups] for r in plan.rounds],
                plan.predicted_ms, plan.lower_bound_ms, planned.wait_ms,
            )
        return planned.plan

    def close(self) -> None:
        """Stops background planning."""
        self._planner.close()


def plan_source_from_args(
    args: argparse.Namespace, num_fcp_ranks: int, batch_lengths: Callable[[int], Sequence[int]], num_steps: int
) -> StepPlanSource:
    """The plan source of a run, configured by --fcp-async-planning, --fcp-log-plan, --fcp-recalibrate and
    --fcp-recalibration-smoothing."""
    planner = planner_from_args(args, num_fcp_ranks)
    recalibrator = None
    if args.fcp_recalibrate:
        if getattr(args, "pipeline_model_parallel_size", 1) > 1:
            # Pipeline schedules interleave the rounds' forward and backward passes: no round has a time of its own.
            logger.warning("FCP: --fcp-recalibrate is off with --pipeline-model-parallel-size > 1")
        else:
            settings = CalibrationSettings(smoothing=args.fcp_recalibration_smoothing)
            recalibrator = StepRecalibrator(planner.cost, settings)
    return StepPlanSource(
        planner,
        batch_lengths,
        num_steps,
        async_planning=args.fcp_async_planning,
        log_plan=args.fcp_log_plan,
        recalibrator=recalibrator,
    )
