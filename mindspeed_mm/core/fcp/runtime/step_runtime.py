"""The FCP step runtime of one process: its place among the FCP ranks, the step's rounds, their
process groups and their measured times.

Every driver runs a step through it: `fcp train`'s round runner, and Megatron's schedule under the
MindSpeed feature (where the patched functions meet in the process-wide instance of
`mindspeed_mm.features_manager.fcp.runtime`). A driver calls `begin_step`, then `next_round` before
each round's forward pass, then `end_step`, which returns every rank's round times when the step was
measured.

A plan numbers the FCP ranks of one DP x CP plane 0..N-1. With TP or PP above 1 there is one plane
per (tp_rank, pp_rank) coordinate; every plane runs the same plan (they train the same samples), so
FCP rank ``i`` of a plan is global rank ``plane[i]`` in each plane.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.runtime.comm_errors import communication
from mindspeed_mm.core.fcp.runtime.recalibration import measured_group_times
from mindspeed_mm.core.fcp.cost import ALGOS
from mindspeed_mm.core.fcp.cost.communicator_memory import framework_communicators
from mindspeed_mm.core.fcp.parallel import AttentionGroup, CommGroupPool, HybridGroup
from mindspeed_mm.core.fcp.parallel.device import collective_device, synchronize
from mindspeed_mm.core.fcp.solver import InvalidPlanError, Plan
from mindspeed_mm.core.fcp.solver.communicators import (
    GroupCatalogue, default_budget, group_catalogue, plan_communicators,
)
from mindspeed_mm.core.fcp.solver.plan import AUTO
from mindspeed_mm.core.fcp.solver.hybrid_split import HybridSplit

from mindspeed_mm_fcp.options import GROUP_POOL_POLICIES

logger = logging.getLogger(__name__)


class FCPRuntimeError(RuntimeError):
    """An FCP patch ran out of order (no layout, no plan, more micro-batches than rounds...)."""


@dataclass(frozen=True)
class FCPRankLayout:
    """Where this process sits among the FCP ranks."""

    planes: tuple[tuple[int, ...], ...]
    """Global ranks of every DP x CP plane, each ascending, planes ordered by their first rank."""
    rank: int
    """This process's global rank."""

    def __post_init__(self) -> None:
        if not self.planes or not self.planes[0]:
            raise ValueError("an FCP layout needs at least one plane of at least one rank")
        sizes = {len(plane) for plane in self.planes}
        if len(sizes) != 1:
            raise ValueError(f"FCP planes must all hold the same number of ranks, got sizes {sorted(sizes)}")
        seen = [r for plane in self.planes for r in plane]
        if len(seen) != len(set(seen)):
            raise ValueError(f"FCP planes overlap: {self.planes}")
        if sum(self.rank in plane for plane in self.planes) != 1:
            raise ValueError(f"global rank {self.rank} is in no FCP plane of {self.planes}")

    @property
    def plane(self) -> tuple[int, ...]:
        """Global ranks of this process's plane."""
        return next(plane for plane in self.planes if self.rank in plane)

    @property
    def num_fcp_ranks(self) -> int:
        """N, the ranks of one plane: the ranks a plan covers."""
        return len(self.planes[0])

    @property
    def fcp_rank(self) -> int:
        """This process's FCP rank (its index in its plane)."""
        return self.plane.index(self.rank)

    def global_ranks(self, fcp_ranks: Sequence[int], plane: Sequence[int] | None = None) -> tuple[int, ...]:
        """Global ranks of `fcp_ranks` in `plane` (default: this process's plane)."""
        members = tuple(self.plane if plane is None else plane)
        return tuple(members[i] for i in fcp_ranks)


@dataclass(frozen=True)
class FCPRound:
    """This process's part of one round of a step."""

    round_index: int
    """Zero-based round of the step (= Megatron micro-batch)."""
    group_ranks: tuple[int, ...]
    """Global ranks of this process's CP group, in group-rank order."""
    rank_in_group: int
    """Index of this process in `group_ranks`."""
    algo: str
    """Attention algorithm of the group: "ring", "ulysses" or "hybrid"."""
    batch_positions: tuple[int, ...]
    """Positions (in the global batch) of the group's samples, in packing order."""
    vision_over_round: bool = False
    """The round's media are encoded by all the plane's ranks (`RoundPlan.vision_over_round`)."""
    hybrid: HybridSplit | None = None
    """A hybrid group's Ulysses x ring split (`GroupPlan.hybrid`); None for the other algos."""

    @property
    def degree(self) -> int:
        """Context-parallel degree of the group."""
        return len(self.group_ranks)


def framework_communicators_held(rank: int) -> int:
    """The process groups of more than one rank holding `rank` that exist before FCP creates any (MindSpeed /
    Megatron's and the world group), less Megatron's gloo copies (named ``*_GLOO``), which hold no device buffers:
    what `cost.communicator_memory.framework_communicators` counts (torch's registry of groups; 0 without one)."""
    registry = getattr(getattr(dist.distributed_c10d, "_world", None), "pg_group_ranks", None)
    if not dist.is_initialized() or not isinstance(registry, dict):
        return 0
    return sum(1 for group, members in registry.items()
               if rank in members and len(members) > 1 and not str(getattr(group, "group_desc", "")).endswith("_GLOO"))


def rounds_of_rank(plan: Plan, layout: FCPRankLayout) -> list[FCPRound]:
    """This process's group and samples in every round of `plan`."""
    if plan.num_ranks != layout.num_fcp_ranks:
        raise FCPRuntimeError(
            f"the plan covers {plan.num_ranks} FCP ranks but each DP x CP plane holds {layout.num_fcp_ranks}"
        )
    rounds = []
    for index, group in enumerate(plan.groups_of_rank(layout.fcp_rank)):
        rounds.append(
            FCPRound(
                round_index=index,
                group_ranks=layout.global_ranks(group.ranks),
                rank_in_group=group.ranks.index(layout.fcp_rank),
                algo=group.algo,
                batch_positions=tuple(group.samples),
                vision_over_round=plan.rounds[index].vision_over_round,
                hybrid=group.hybrid,
            )
        )
    return rounds


@dataclass(frozen=True)
class FCPRuntimeSettings:
    """The options of the run that the patches need."""

    group_pool: str = "lazy"
    """`lazy`: create a plan's groups (and make them ready) before its step; `prewarm`: every group of the catalogue
    at start-up."""
    max_degree: int | None = None
    """Largest CP group (None: the whole plane)."""
    communicator_budget: int | str | None = AUTO
    """Communicators one rank may join (`SolverConfig.communicator_budget`): with `max_degree`, `algos` and
    `plane_group`, what fixes the run's catalogue of groups (`catalogue`), the same as its planner's."""
    algos: tuple[str, ...] = ALGOS
    """The attention algorithms the plans may use."""
    plane_group: bool = True
    """The plane's own group is one of the run's communicators (lockstep rounds spreading their media)."""
    comm_timeout_s: float | None = None
    """Bound of every exchange on an FCP group (None: torch's default)."""
    attention_kernel: str = "auto"
    """Local attention kernel of the FCP attention (a value of `fcp_attention_kernel`)."""
    log_plan: bool = False
    """Log what each round runs (`fcp_log_plan`): the plans, and how a group split its vision tower."""
    hybrid_block: int = 0
    """The largest block of a hybrid group (`CostModel.hybrid_rule`: its planner's); 0: no hybrid group."""

    def __post_init__(self) -> None:
        if self.group_pool not in GROUP_POOL_POLICIES:
            raise ValueError(f"group_pool must be one of {', '.join(GROUP_POOL_POLICIES)}, got {self.group_pool!r}")
        if self.max_degree is not None and self.max_degree < 1:
            raise ValueError(f"max_degree must be positive, got {self.max_degree}")

    def catalogue(self, num_ranks: int) -> GroupCatalogue:
        """The groups the run's plans may use on planes of `num_ranks` ranks (`communicators.group_catalogue`)."""
        budget = default_budget(num_ranks) if self.communicator_budget == AUTO else self.communicator_budget
        return group_catalogue(num_ranks, min(self.max_degree or num_ranks, num_ranks), budget,  # type: ignore[arg-type]
                               self.algos, self.plane_group, self.hybrid_block)


PlanSource = Callable[[int], Plan]
"""Gives the plan of a training step (zero-based); called once per step on every rank, in step order."""


@runtime_checkable
class MeasuringPlanSource(Protocol):
    """A plan source that also learns how long the groups of a step's plan took (e.g. to recalibrate)."""

    def __call__(self, step: int) -> Plan:
        """The plan of training step `step`."""
        ...

    @property
    def wants_measurements(self) -> bool:
        """Whether the runtime should time the rounds (a device synchronisation per round, one all-reduce per step)."""
        ...

    def record_measured(self, step: int, measured_group_ms: list[list[float]]) -> None:
        """Receives the time of every group of the rounds of step `step`'s plan (the same on every rank)."""
        ...


class FCPRuntime:
    """The FCP state of this process."""

    def __init__(self, settings: FCPRuntimeSettings | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.settings = settings or FCPRuntimeSettings()
        self.layout: FCPRankLayout | None = None
        self.groups: CommGroupPool | None = None
        self.plan_source: PlanSource | None = None
        self._clock = clock
        self._rounds: list[FCPRound] | None = None
        self._next_round = 0
        self._plan: Plan | None = None
        self._round_starts: list[float] | None = None
        self._step = 0

    # ------------------------------------------------------------------ start-up
    def set_layout(self, layout: FCPRankLayout) -> None:
        """Records the FCP planes; with the `prewarm` policy also creates every group (collective)."""
        self.layout = layout
        self.groups = None
        logger.info(
            "FCP: rank %d is FCP rank %d of %d (%d plane(s))",
            layout.rank, layout.fcp_rank, layout.num_fcp_ranks, len(layout.planes),
        )
        catalogue = self.catalogue
        logger.info("FCP: the plans' groups are %s", catalogue.describe())
        held, assumed = framework_communicators_held(layout.rank), framework_communicators(
            layout.num_fcp_ranks, tp=len(layout.planes))
        (logger.warning if held > assumed else logger.info)(
            "FCP: rank %d holds %d MindSpeed / Megatron communicators; the memory limit sets aside buffers for %d",
            layout.rank, held, assumed)
        if self.settings.group_pool == "prewarm":
            pool = self._pool()
            pool.prewarm(self._candidate_groups())
            logger.info("FCP: prewarmed %d process groups and made them ready; this rank holds %d FCP communicators",
                        pool.num_created, pool.num_communicators)

    @property
    def catalogue(self) -> GroupCatalogue:
        """The groups the run's plans may use (FCP ranks of one plane)."""
        return self.settings.catalogue(self.require_layout().num_fcp_ranks)

    def require_layout(self) -> FCPRankLayout:
        """The recorded layout; raises when Megatron's model-parallel initialisation has not run."""
        if self.layout is None:
            raise FCPRuntimeError(
                "FCP has no rank layout: megatron.core.parallel_state.initialize_model_parallel must run "
                "(with the FCP patch applied) before training"
            )
        return self.layout

    def set_plan_source(self, source: PlanSource, first_step: int = 0) -> None:
        """Registers what plans each step (the plan-aware sampler of the data loader); the next step to run is
        `first_step` (a resumed run starts past 0)."""
        self.plan_source = source
        self._step = first_step

    @property
    def step(self) -> int:
        """The zero-based step running, or the next to run: the run's one step counter."""
        return self._step

    # ------------------------------------------------------------------ steps
    def begin_step(self, plan: Plan | None = None, *, measure: bool = False) -> list[FCPRound]:
        """Starts a step with `plan` (default: the plan source's next plan); creates its groups (collective).

        The rounds are timed (a device synchronisation per round, one all-reduce at `end_step`) when
        `measure` is set or the plan source wants measurements."""
        layout = self.require_layout()
        if self._rounds is not None:
            raise FCPRuntimeError("begin_step called while the previous step is still running")
        if plan is None:
            if self.plan_source is None:
                raise FCPRuntimeError(
                    "FCP has no plan source: with MindSpeed-MM set data.dataloader_param.dataloader_mode: sampler and "
                    "data.dataloader_param.sampler_type: FCPBatchSampler in the YAML; other data loaders must "
                    "register one with get_fcp_runtime().set_plan_source(...) before the first training step"
                )
            plan = self.plan_source(self._step)
            measure = measure or self._source_measures()
        rounds = rounds_of_rank(plan, layout)
        try:
            self.catalogue.check_plan(plan)
        except InvalidPlanError as error:
            raise FCPRuntimeError(f"step {self._step + 1}: {error}") from None
        pool = self._pool()
        if pool.prewarm(self._in_every_plane(sorted(plan_communicators(plan)))):
            logger.info("FCP: rank %d now holds %d FCP communicators (at most %d: %s)", layout.rank,
                        pool.num_communicators, self.catalogue.worst, self.catalogue.describe())
        self._rounds = rounds
        self._next_round = 0
        self._plan = plan
        self._round_starts = [] if measure else None
        return rounds

    def _source_measures(self) -> bool:
        return isinstance(self.plan_source, MeasuringPlanSource) and self.plan_source.wants_measurements

    @property
    def step_rounds(self) -> list[FCPRound]:
        """Rounds of the running step."""
        if self._rounds is None:
            raise FCPRuntimeError("no FCP step is running (begin_step was not called)")
        return self._rounds

    def next_round(self) -> FCPRound:
        """Moves to the next round of the running step and returns it."""
        rounds = self.step_rounds
        if self._next_round >= len(rounds):
            raise FCPRuntimeError(f"the step's plan has {len(rounds)} rounds, but a micro-batch beyond them started")
        if self._round_starts is not None:
            synchronize(collective_device())
            self._round_starts.append(self._clock())
        self._next_round += 1
        return rounds[self._next_round - 1]

    @property
    def current_round(self) -> FCPRound:
        """The round being run."""
        if self._rounds is None or self._next_round == 0:
            raise FCPRuntimeError("no FCP round is running: the batch was requested outside the FCP driver")
        return self._rounds[self._next_round - 1]

    @property
    def active_round(self) -> FCPRound | None:
        """The round being run, or None outside an FCP step (e.g. evaluation or a model built without FCP)."""
        if self._rounds is None or self._next_round == 0:
            return None
        return self._rounds[self._next_round - 1]

    def end_step(self) -> np.ndarray | None:
        """Ends the running step; every round must have run.

        A measured step returns `[FCP rank, round]` milliseconds, the same on every rank (one all-reduce
        over all ranks; with several planes, the slowest), and a measuring plan source receives the
        time of every group. An unmeasured step returns None."""
        rounds = self.step_rounds
        ran = self._next_round
        plan, starts = self._plan, self._round_starts
        self.abort_step()
        step = self._step
        self._step += 1
        if ran != len(rounds):
            raise FCPRuntimeError(f"the step ran {ran} micro-batches but its plan has {len(rounds)} rounds")
        if starts is None or plan is None:
            return None
        synchronize(collective_device())
        starts.append(self._clock())
        times = self._rank_round_times(plan, starts, step)
        if self._source_measures():
            self.plan_source.record_measured(step, measured_group_times(plan, times))
        return times

    def _rank_round_times(self, plan: Plan, boundaries: list[float], step: int) -> np.ndarray:
        """Every FCP rank's time in each round, in ms, from this rank's round boundaries and every other rank's."""
        layout = self.require_layout()
        # [FCP rank, round]: each rank fills its row; MAX also keeps the slowest plane (TP / PP above 1).
        # float32: MindSpeed's all_reduce wrapper reduces a float64 tensor in a float32 copy and drops the result.
        times = torch.zeros(layout.num_fcp_ranks, plan.num_rounds, dtype=torch.float32)
        times[layout.fcp_rank] = torch.tensor([(b - a) * 1e3 for a, b in zip(boundaries, boundaries[1:])],
                                              dtype=torch.float32)
        times = times.to(collective_device())
        with communication(f"step {step + 1}", "the measured round times", range(dist.get_world_size()),
                           self.settings.comm_timeout_s):
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
        return times.cpu().numpy().astype(np.float64)

    def abort_step(self) -> None:
        """Forgets the running step after an error."""
        self._rounds = None
        self._next_round = 0
        self._plan = None
        self._round_starts = None

    def process_group(self, fcp_round: FCPRound) -> dist.ProcessGroup | None:
        """The CP group of `fcp_round` (None for a group of one rank)."""
        if fcp_round.degree == 1:
            return None
        return self._pool().get(fcp_round.group_ranks)

    def attention_group(self, fcp_round: FCPRound) -> AttentionGroup:
        """What `fcp_attention` attends over in `fcp_round`: its CP group (`process_group`), or for a hybrid group
        this rank's Ulysses block and ring (created by `begin_step` with the plan's other groups)."""
        if fcp_round.hybrid is None:
            return self.process_group(fcp_round)
        return HybridGroup.from_pool(self._pool(), fcp_round.group_ranks, fcp_round.hybrid.ulysses_degree,
                                     fcp_round.group_ranks[fcp_round.rank_in_group])

    def plane_group(self) -> dist.ProcessGroup | None:
        """The process group of this rank's whole plane (None for a plane of one rank), which a round encoding
        its media over all its ranks exchanges on; created by `begin_step` for such plans."""
        layout = self.require_layout()
        if layout.num_fcp_ranks == 1:
            return None
        return self._pool().get(layout.plane)

    def _candidate_groups(self) -> list[tuple[int, ...]]:
        """Every communicator a plan can use, in every plane: those of the catalogue's groups and the plane's."""
        return self._in_every_plane(self.catalogue.communicators())

    def _pool(self) -> CommGroupPool:
        """The group pool, bounded by the catalogue's communicators in every plane (created on first need)."""
        if self.groups is None:
            self.groups = CommGroupPool(max_communicators=max(1, len(self._candidate_groups())),
                                        timeout_s=self.settings.comm_timeout_s)
        return self.groups

    def _in_every_plane(self, fcp_groups: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """Global-rank groups of `fcp_groups` in every plane, in one order identical on all ranks."""
        layout = self.require_layout()
        return [layout.global_ranks(g, plane) for g in fcp_groups if len(g) > 1 for plane in layout.planes]
