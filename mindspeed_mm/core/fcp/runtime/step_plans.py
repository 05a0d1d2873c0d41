"""The global batches of a run and their FCP plans, shared by the data loader and the step runtime.

The round loader and the step runtime both need the plan of a step, at different times: the runtime when the
step starts, the loader when it hands out the step's samples (which, with data-loader workers, can be a few rounds
ahead). `StepPlans` plans each step once and keeps a plan until both have moved past it. The steps are the run's
(`RunSteps`), counted by the runtime (`FCPRuntime.step`) and by the loader, each at its own pace.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.device import collective_device
from mindspeed_mm.core.fcp.runtime.batch_planner import BatchPlanner
from mindspeed_mm.core.fcp.runtime.comm_errors import communication
from mindspeed_mm.core.fcp.runtime.plan_source import StepPlanSource
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.solver import Plan
from mindspeed_mm.core.fcp.solver.communicators import budget_guaranteeing
from mindspeed_mm.core.fcp.solver.errors import CommunicatorBudgetError, InfeasibleSampleError

logger = logging.getLogger(__name__)


class FCPDataError(ValueError):
    """The data of a run cannot be planned by FCP (the message names the sample or the YAML key)."""


@dataclass(frozen=True)
class GlobalBatchOrder:
    """Which dataset samples form each step's global batch.

    The same order as MindSpeed-MM's `BaseRandomBatchSampler` on one data-parallel rank: epochs of
    `num_samples - num_samples % global_batch_size` samples, each a `torch.randperm` seeded with the epoch
    number (or 0, 1, 2, ... without shuffling), cut into consecutive global batches.
    """

    num_samples: int
    global_batch_size: int
    shuffle: bool

    def __post_init__(self) -> None:
        if self.global_batch_size < 1:
            raise FCPDataError(f"global_batch_size must be positive, got {self.global_batch_size}")
        if self.num_samples < self.global_batch_size:
            raise FCPDataError(
                f"the training dataset holds {self.num_samples} samples, fewer than one global batch "
                f"(global_batch_size {self.global_batch_size})"
            )

    @property
    def samples_per_epoch(self) -> int:
        return self.num_samples - self.num_samples % self.global_batch_size

    def indices(self, step: int) -> list[int]:
        """Dataset indices of the global batch of `step` (zero-based), in batch-position order."""
        start = step * self.global_batch_size
        epoch, offset = divmod(start, self.samples_per_epoch)
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(epoch)
            order = torch.randperm(self.num_samples, generator=generator)[: self.samples_per_epoch].tolist()
        else:
            order = list(range(self.samples_per_epoch))
        return order[offset: offset + self.global_batch_size]


def check_budget_holds_the_longest(lengths: Sequence[int], planner: BatchPlanner) -> None:
    """Raises naming `fcp_communicator_budget` (or `fcp_max_degree`) and the figures when the groups the budget allows
    cannot guarantee a plan to the dataset's longest sample (`GroupCatalogue.guaranteed_degree`)."""
    if planner.static_cp_degree is not None or not lengths:
        return
    config, cost = planner.solver_config, planner.cost
    index = max(range(len(lengths)), key=lambda i: (lengths[i], -i))
    needed = cost.min_degree(int(lengths[index]))
    catalogue = config.catalogue(cost.algos, cost.hybrid_rule.block)
    if needed > config.degree_limit or needed <= catalogue.guaranteed_degree:
        return   # too long for any group: the planner names fcp_max_degree itself
    enough = budget_guaranteeing(config.num_ranks, config.degree_limit, cost.algos,
                                 catalogue.plane, needed, catalogue.hybrid_block)
    fix = (f"raise fcp_communicator_budget to at least {enough}" if enough is not None else
           "raise fcp_communicator_budget")
    raise FCPDataError(
        f"training sample {index} of the dataset ({lengths[index]} tokens) needs a group of {needed} ranks at "
        f"{cost.capacity_tokens} tokens per rank, but within fcp_communicator_budget={catalogue.budget} "
        f"communicators per rank the run's groups are {catalogue.describe()}, and every batch has a plan only if its "
        f"samples need at most {catalogue.guaranteed_degree} ranks: {fix}, or set fcp_max_degree to a power of two "
        f"at least {needed}")


class StepPlans:
    """Each step's global batch and plan, planned once, for two readers that ask for their steps in order."""

    READERS = ("sampler", "runtime")

    def __init__(self, order: GlobalBatchOrder, lengths: Sequence[int], source_factory, steps: RunSteps,
                 patches: Sequence[int] | None = None) -> None:
        """`source_factory(batch_lengths, batch_patches)` builds the `StepPlanSource` of `steps` from functions
        step -> token lengths and step -> vision patches (None: not priced)."""
        self.order = order
        self.lengths = list(lengths)
        self.patches = None if patches is None else list(patches)
        if self.patches is not None and len(self.patches) != len(self.lengths):
            raise FCPDataError(f"{len(self.patches)} vision patch counts for {len(self.lengths)} samples")
        self.steps = steps
        self.source: StepPlanSource = source_factory(self._batch_lengths,
                                                     None if self.patches is None else self._batch_patches)
        self._plans: dict[int, Plan] = {}
        self._oldest_read = dict.fromkeys(self.READERS, steps.first)
        """Each reader's oldest step still needed: plans before both are dropped."""
        self._lock = threading.Lock()

    def _batch_lengths(self, step: int) -> list[int]:
        return [self.lengths[i] for i in self.order.indices(step)]

    def _batch_patches(self, step: int) -> list[int]:
        assert self.patches is not None
        return [self.patches[i] for i in self.order.indices(step)]

    def plan(self, step: int, reader: str) -> Plan:
        """The plan of `step` for `reader` ("sampler" or "runtime"); a reader asks for its steps in order."""
        with self._lock:
            if step < self._oldest_read[reader]:
                raise RuntimeError(
                    f"the FCP {reader} asked for step {step + 1} after step {self._oldest_read[reader] + 1}")
            if step not in self._plans:  # both readers go in step order: this is the step after the newest
                self._plans[step] = self._next_plan(step)
            self._oldest_read[reader] = step
            oldest = min(self._oldest_read.values())
            for done in [s for s in self._plans if s < oldest]:
                del self._plans[done]
            return self._plans[step]

    def can_plan(self, step: int) -> bool:
        """Whether the plan of `step` is made, or can be made now."""
        with self._lock:
            if step in self._plans:
                return True
        return self.source.can_plan(step)

    def _next_plan(self, step: int) -> Plan:
        try:
            return self.source.plan(step).plan
        except CommunicatorBudgetError as err:
            index = self.order.indices(step)[err.index]
            raise FCPDataError(f"training sample {index} of the dataset: {err}") from None
        except InfeasibleSampleError as err:
            index = self.order.indices(step)[err.index]
            patches = "" if self.patches is None else f", {self.patches[index]} vision patches"
            raise FCPDataError(
                f"training sample {index} of the dataset ({err.length} tokens after vision-token expansion{patches}) "
                f"does not fit "
                f"any FCP group: it needs {-(-err.length // err.capacity_tokens)} ranks at {err.capacity_tokens} "
                f"tokens per rank, but groups hold at most {err.max_degree} (raise fcp_max_degree, "
                f"fcp_max_tokens_per_rank or shorten the sample with seq_length)"
            ) from None

    def samples(self, step: int, positions: Sequence[int]) -> list[int]:
        """Dataset indices of the global-batch positions `positions` of `step`."""
        batch = self.order.indices(step)
        return [batch[p] for p in positions]

    def close(self) -> None:
        self.source.close()


class RuntimePlanSource:
    """The step runtime's plan source over `StepPlans`: every rank checks a step's plan before running it, and
    measured group times go to the underlying source (to recalibrate)."""

    def __init__(self, plans: StepPlans, comm_timeout_s: float | None = None) -> None:
        self.plans = plans
        self.comm_timeout_s = comm_timeout_s
        """Bound of the digest all-gather (`fcp_comm_timeout_s`)."""

    def __call__(self, step: int) -> Plan:
        plan = self.plans.plan(step, "runtime")
        with communication(f"step {step + 1}", "the plan digests", range(dist.get_world_size()), self.comm_timeout_s):
            self.plans.source.check(plan, step, device=collective_device())
        return plan

    @property
    def wants_measurements(self) -> bool:
        return self.plans.source.wants_measurements

    def record_measured(self, step: int, measured_group_ms: list[list[float]]) -> None:
        """The measured group times of `step` (to recalibrate)."""
        self.plans.source.record_measured(step, measured_group_ms)
