"""`fcp train`: trains the tiny Qwen3-style model with FCP (or Megatron's static ring CP) on every rank.

With a `vision:` section the model is the tiny Qwen3-VL-shaped VLM (`vision.model`), the data the
synthetic video-caption set, and each group splits the vision encoder over its ranks (`vision.runner`);
the planner then also sees every sample's vision-encoder patches.

Per step: get the plan (planned in the background during the previous step), check that all ranks
hold the same executable plan, run the rounds, all-reduce the gradients once over all FCP ranks,
take the optimizer step, and log in Megatron's format.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import AbstractContextManager

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from mindspeed_mm.core.fcp.cost.calibration import CorrectionTable, Observation
from mindspeed_mm.core.fcp.runtime.comm_errors import communication
from mindspeed_mm.core.fcp.sandbox.run_config import ConfigError, RunConfig
from mindspeed_mm.core.fcp.sandbox.text_dataset import build_dataset
from mindspeed_mm.core.fcp.sandbox.distributed import DistributedContext
from mindspeed_mm.core.fcp.sandbox.grad_sync import allreduce_gradients
from mindspeed_mm.core.fcp.sandbox.step_log import (
    iteration_line,
    memory_line,
    plan_summary_line,
)
from mindspeed_mm.core.fcp.sandbox.memory_tracker import MemoryTracker
from mindspeed_mm.core.fcp.sandbox.gpt_model import build_gpt_model
from mindspeed_mm.core.fcp.sandbox.optimizer import build_optimizer
from mindspeed_mm.core.fcp.runtime.batch_planner import BatchPlanner
from mindspeed_mm.core.fcp.runtime.recalibration import calibration_line, measured_group_times
from mindspeed_mm.core.fcp.sandbox.results import StepRecord, TrainResult
from mindspeed_mm.core.fcp.sandbox.round_runner import RoundRunner, StepOutput
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRankLayout, FCPRuntime, FCPRuntimeSettings
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler, PlanDataset
from mindspeed_mm.core.fcp.runtime.plan_source import StepPlanSource
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.parallel.device import synchronize
from mindspeed_mm.core.fcp.parallel.kernels import KernelUnavailableError, check_kernel_option
from mindspeed_mm.core.fcp.solver import InfeasibleSampleError, Plan
from mindspeed_mm.core.fcp.solver.plan import LOCKSTEP

logger = logging.getLogger(__name__)

_TIMING_KEYS = ("plan_wait_ms", "plan_check_ms", "forward_backward_ms", "grad_sync_ms", "optimizer_ms", "step_ms")


class TokenAccountingError(RuntimeError):
    """A step did not train every sample of its global batch exactly once (tokens, loss tokens, vision patches)."""


def check_samples_fit(dataset: PlanDataset, planner: BatchPlanner) -> None:
    """Raises `InfeasibleSampleError` for the first sample that no allowed group can hold."""
    max_degree = planner.static_cp_degree or planner.solver_config.degree_limit
    capacity = planner.cost.capacity_tokens
    too_long = np.flatnonzero(dataset.lengths > max_degree * capacity)
    if too_long.size:
        index = int(too_long[0])
        raise InfeasibleSampleError(index, int(dataset.lengths[index]), capacity, max_degree)


def _check_accounting(iteration: int, indices: range, lengths: np.ndarray, loss_tokens: np.ndarray,
                      tokens: np.ndarray, trained_loss_tokens: np.ndarray, groups: np.ndarray,
                      patches: np.ndarray | None, encoded_patches: np.ndarray) -> None:
    for position, index in enumerate(indices):
        expected_patches = 0 if patches is None else int(patches[position])
        if encoded_patches[position] != expected_patches:
            raise TokenAccountingError(
                f"step {iteration}: sample {index} has {expected_patches} vision patches, but the ranks encoded "
                f"{int(encoded_patches[position])}"
            )
        if groups[position] != 1 or tokens[position] != lengths[position] or (
            trained_loss_tokens[position] != loss_tokens[position]
        ):
            raise TokenAccountingError(
                f"step {iteration}: sample {index} ({int(lengths[position])} tokens, {int(loss_tokens[position])} "
                f"with loss) was trained by {int(groups[position])} groups with {int(tokens[position])} tokens "
                f"and {int(trained_loss_tokens[position])} loss tokens"
            )


class Trainer:
    """Builds everything a rank needs and runs the training loop."""

    def __init__(self, config: RunConfig, context: DistributedContext) -> None:
        self.config = config
        self.context = context
        try:
            check_kernel_option(config.fcp.attention_kernel)
        except KernelUnavailableError as error:
            raise ConfigError(str(error)) from None
        self.planner = config.batch_planner(context.world_size)
        self.dataset: PlanDataset
        self.model: torch.nn.Module
        if config.vision is not None:
            from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import build_video_dataset
            from mindspeed_mm.core.fcp.sandbox.vision.vlm_model import build_vlm_model

            self.dataset = build_video_dataset(config)
            self.model = build_vlm_model(config.model, config.vision, config.training.seed).to(context.device)
        else:
            self.dataset = build_dataset(config)
            self.model = build_gpt_model(config.model, config.training.seed).to(context.device)
        check_samples_fit(self.dataset, self.planner)
        self.sampler = PlanAwareSampler(self.dataset, config.training.global_batch_size, config.training.train_iters)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, config.optimizer)
        solver = self.planner.solver_config
        # The runtime's catalogue of groups is the planner's; a static layout's groups are contiguous ranges of its
        # degree (no budget: one group per rank).
        self.runtime = FCPRuntime(FCPRuntimeSettings(
            group_pool=config.fcp.group_pool,
            max_degree=self.planner.static_cp_degree or solver.degree_limit,
            communicator_budget=None if self.planner.static_cp_degree else solver.communicator_budget,
            algos=self.planner.cost.algos,
            plane_group=solver.vision_over_round and solver.step_semantics == LOCKSTEP,
            comm_timeout_s=context.comm_timeout_s,
            attention_kernel=config.fcp.attention_kernel,
            hybrid_block=self.planner.cost.hybrid_rule.block,
        ))
        with communication("start-up", "creation of the FCP groups", self._world_ranks, context.comm_timeout_s):
            self.runtime.set_layout(FCPRankLayout(planes=(tuple(self._world_ranks),), rank=context.rank))
        self.runner = self._runner()
        self.memory = MemoryTracker(self.model, self.optimizer, context.device)

    @property
    def _world_ranks(self) -> list[int]:
        return list(range(self.context.world_size))

    def _world_exchange(self, step: int, what: str) -> AbstractContextManager[None]:
        """Names step `step` (zero-based) and the world group in a communication failure of the block."""
        return communication(f"step {step + 1}", f"{what} (world group)", self._world_ranks,
                             self.context.comm_timeout_s)

    def _runner(self) -> RoundRunner:
        if self.config.vision is not None:
            from mindspeed_mm.core.fcp.sandbox.vision.vlm_round_runner import VLMRoundRunner

            return VLMRoundRunner(self.model, self.sampler, self.runtime, self.context.device)
        return RoundRunner(self.model, self.sampler, self.runtime, self.context.device)

    def _plan_source(self) -> StepPlanSource:
        """The run's plans, one step ahead with fcp_async_planning, recalibrated with fcp_recalibrate (FCP
        only). Plan logging stays here (rank 0, with the measured round times), so the source logs nothing."""
        options = dataclasses.replace(self.config.fcp, log_plan=False,
                                      recalibrate=self.config.fcp.recalibrate and self.config.is_fcp)
        return options.plan_source(self.planner, self.sampler.batch_lengths, RunSteps(0, self.config.training.train_iters),
                                   batch_patches=self.sampler.batch_patches)

    def train(self, progress: bool = False) -> TrainResult:
        """Runs all steps; every rank returns the same records."""
        t = self.config.training
        result = TrainResult(
            context_parallel_algo=t.context_parallel_algo,
            world_size=self.context.world_size,
            async_planning=self.config.fcp.async_planning,
        )
        bar = tqdm(total=t.train_iters, desc="fcp train", unit="step", disable=not progress or self.context.rank != 0)
        self.model.train()
        with self._plan_source() as plans:
            for step in range(t.train_iters):
                record = self._train_step(step, plans)
                result.steps.append(record)
                bar.update(1)
                bar.set_postfix(loss=f"{record.loss:.4f}")
        bar.close()
        return result

    def _train_step(self, step: int, plans: StepPlanSource) -> StepRecord:
        step_started = time.perf_counter()
        planned = plans.plan(step)
        plan = planned.plan

        checked = time.perf_counter()
        with self._world_exchange(step, "plan digest all-gather"):
            plans.check(plan, step, device=self.context.device)
        plan_check_ms = (time.perf_counter() - checked) * 1e3

        output = self.runner.run_step(plan, step)

        synced = time.perf_counter()
        with self._world_exchange(step, "gradient all-reduce"):
            allreduce_gradients(self.params)
            synchronize(self.context.device)
        grad_sync_ms = (time.perf_counter() - synced) * 1e3

        stepped = time.perf_counter()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        synchronize(self.context.device)
        optimizer_ms = (time.perf_counter() - stepped) * 1e3
        step_ms = (time.perf_counter() - step_started) * 1e3

        timings = {
            "plan_wait_ms": planned.wait_ms,
            "plan_check_ms": plan_check_ms,
            "forward_backward_ms": output.forward_backward_ms,
            "grad_sync_ms": grad_sync_ms,
            "optimizer_ms": optimizer_ms,
            "step_ms": step_ms,
        }
        # The step's factors are read before its times are recorded (which drops the older tables).
        record = self._summarise(step, plan, output, timings, plans.corrections_for_step(step))
        observations = plans.record_measured(step, record.measured_group_ms)
        self._log(record, plan, observations, plans)
        return record

    def _summarise(self, step: int, plan: Plan, output: StepOutput, timings: dict[str, float],
                   corrections: CorrectionTable | None) -> StepRecord:
        """Reduces this rank's loss, accounting and timings over all ranks (bookkeeping, outside the timings)."""
        acc = output.accounting
        size = acc.tokens.numel()
        world = self.context.world_size
        # Each rank fills its own slot, so the sum is every rank's encoded patches.
        rank_patches = torch.zeros(world, dtype=torch.float64)
        rank_patches[self.context.rank] = float(sum(r.vision_patches for r in output.rounds))
        rank_grad_sync_ms = torch.zeros(world, dtype=torch.float64)
        rank_grad_sync_ms[self.context.rank] = timings["grad_sync_ms"]
        summed = torch.cat(
            [
                output.loss_sum.reshape(1),
                acc.tokens,
                acc.loss_tokens,
                acc.groups,
                acc.vision_patches,
                rank_patches,
                rank_grad_sync_ms,
                torch.tensor([timings[k] for k in _TIMING_KEYS], dtype=torch.float64),
            ]
        )
        with self._world_exchange(step, "all-reduce of the step's losses, token counts and times"):
            summed = summed.to(self.context.device)
            dist.all_reduce(summed, op=dist.ReduceOp.SUM)
            summed = summed.cpu()

        indices = self.sampler.batch_indices(step)
        lengths = self.sampler.batch_lengths(step)
        loss_tokens = self.dataset.loss_tokens[indices.start : indices.stop]
        tokens = summed[1 : 1 + size].numpy().round().astype(np.int64)
        trained_loss_tokens = summed[1 + size : 1 + 2 * size].numpy().round().astype(np.int64)
        groups = summed[1 + 2 * size : 1 + 3 * size].numpy().round().astype(np.int64)
        encoded_patches = summed[1 + 3 * size : 1 + 4 * size].numpy().round().astype(np.int64)
        per_rank_patches = summed[1 + 4 * size : 1 + 4 * size + world].numpy().round().astype(np.int64)
        grad_sync_ms_per_rank = summed[1 + 4 * size + world : 1 + 4 * size + 2 * world]
        times_stop = 1 + 4 * size + 2 * world
        rank_round_ms = output.rank_round_ms
        patches = self.sampler.batch_patches(step)
        _check_accounting(step + 1, indices, lengths, loss_tokens, tokens, trained_loss_tokens, groups,
                          patches, encoded_patches)
        mean_timings = summed[times_stop:] / world
        return StepRecord(
            iteration=step + 1,
            loss=float(summed[0]) / self.sampler.batch_loss_tokens(step),
            sample_indices=list(indices),
            lengths=[int(x) for x in lengths],
            tokens_trained=tokens.tolist(),
            loss_tokens_trained=trained_loss_tokens.tolist(),
            groups_trained=groups.tolist(),
            plan_digest=plan.digest(),
            round_degrees=[[g.degree for g in r.groups] for r in plan.rounds],
            predicted_round_ms=[r.predicted_ms for r in plan.rounds],
            measured_round_ms=rank_round_ms.max(axis=0).tolist(),
            predicted_group_ms=[[g.predicted_ms for g in r.groups] for r in plan.rounds],
            measured_group_ms=measured_group_times(plan, rank_round_ms),
            corrections=corrections.to_json() if corrections is not None else None,
            timings_ms={k: float(v) for k, v in zip(_TIMING_KEYS, mean_timings.tolist())},
            vision_patches_trained=encoded_patches.tolist() if patches is not None else [],
            vision_patches_per_rank=per_rank_patches.tolist() if patches is not None else [],
            grad_sync_ms_per_rank=grad_sync_ms_per_rank.tolist(),
        )

    def _log(self, record: StepRecord, plan: Plan, observations: list[Observation] | None,
             plans: StepPlanSource) -> None:
        t = self.config.training
        iteration = record.iteration
        if self.context.rank == 0 and self.config.fcp.log_plan:
            logger.info(plan_summary_line(iteration, plan, record.measured_round_ms))
            if observations is not None:
                logger.info(calibration_line(iteration, observations, plans.learned_factors()))
        if self.context.rank == 0 and (iteration % t.log_interval == 0 or iteration == t.train_iters):
            logger.info(
                iteration_line(
                    iteration=iteration,
                    train_iters=t.train_iters,
                    consumed_samples=iteration * t.global_batch_size,
                    elapsed_ms=record.timings_ms["step_ms"],
                    learning_rate=self.config.optimizer.lr,
                    global_batch_size=t.global_batch_size,
                    loss=record.loss,
                    plan_wait_ms=record.timings_ms["plan_wait_ms"],
                    forward_backward_ms=record.timings_ms["forward_backward_ms"],
                    grad_sync_ms=record.timings_ms["grad_sync_ms"],
                )
            )
        if iteration in (1, t.train_iters):
            logger.info(memory_line(self.context.rank, iteration, self.memory.read()))
