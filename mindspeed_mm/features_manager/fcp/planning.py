"""The planner and per-step plan source of a Megatron run, built from the `--fcp-*` options.

The data loader knows the token lengths of each global batch before the step runs; it registers a
plan source built here with `get_fcp_runtime().set_plan_source(...)`, and the FCP forward-backward
driver then takes one plan per step from it. With --fcp-recalibrate the driver hands the measured
group times of each step back, and later plans use the corrected cost model. The plan source itself
(`StepPlanSource`, re-exported here) lives in the core executor, where `fcp train` uses it too.
"""
from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

from mindspeed_mm.core.fcp.cost import ALGOS, CostModel
from mindspeed_mm.core.fcp.cost.builder import build_cost_model
from mindspeed_mm.core.fcp.cost.calibration import CalibrationSettings
from mindspeed_mm.core.fcp.executor.planning import BatchPlanner
from mindspeed_mm.core.fcp.executor.recalibration import StepRecalibrator
from mindspeed_mm.core.fcp.executor.step_plan_source import StepPlanSource
from mindspeed_mm.core.fcp.solver import SolverConfig

__all__ = ["StepPlanSource", "cost_model_from_args", "plan_source_from_args", "planner_from_args"]

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
        logger=logger,
    )
