"""A long training run simulated plan by plan: the distinct communicators each rank joins, with the cost model drifting.

Every step's global batch is drawn from a workload (`mixes.draw_lengths`, one seed per step) and planned by the run's
own plan source (`StepPlanSource`: the planner, with online recalibration where the model drifts). With drift, the
groups' "measured" times are the base model's times times true per-(degree, algo) factors that wander within
+-`Drift.spread` (`DriftingFactors`); the recalibration learns them two steps later, as in a real run, so the plans
follow a model that keeps moving. Each rank's distinct communicators (`communicators.plan_communicators`) are counted
as they appear, with the worst rank's count each time it grows.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.runtime.batch_planner import BatchPlanner
from mindspeed_mm.core.fcp.runtime.plan_source import StepPlanSource
from mindspeed_mm.core.fcp.runtime.recalibration import StepRecalibrator
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.communicators import plan_communicators
from mindspeed_mm.core.fcp.solver.placement import placed_node_part
from mindspeed_mm.core.fcp.solver.plan import IDLE, LOCKSTEP
from mindspeed_mm.core.fcp.solver.step_time import step_ms

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Drift:
    """How the true group times move away from the cost model."""

    spread: float = 0.15
    """Every factor stays within [1 - spread, 1 + spread]."""
    step: float = 0.05
    """Standard deviation of a factor's logarithm's change from one step to the next."""
    seed: int = 0
    """Seed of the walks."""

    def __post_init__(self) -> None:
        if not 0 < self.spread < 1 or not self.step > 0:
            raise ValueError(f"drift needs 0 < spread < 1 and step > 0, got {self.spread} and {self.step}")


class DriftingFactors:
    """True factor of every (degree, algo) at every step: a seeded random walk of its logarithm, reflected at
    log(1 +- spread), starting uniformly within the bounds. Deterministic: the walk of each key has its own seed."""

    def __init__(self, drift: Drift) -> None:
        self.drift = drift
        self._low, self._high = math.log(1 - drift.spread), math.log(1 + drift.spread)
        self._walks: dict[tuple[int, str], list[float]] = {}
        self._rngs: dict[tuple[int, str], np.random.Generator] = {}

    def factor(self, step: int, degree: int, algo: str) -> float:
        """The factor of (degree, algo) at `step`."""
        key = (int(degree), algo)
        walk = self._walks.get(key)
        if walk is None:
            rng = np.random.default_rng([self.drift.seed, key[0], 0 if algo == "ring" else 1])
            walk = [float(rng.uniform(self._low, self._high))]
            self._walks[key], self._rngs[key] = walk, rng
        while len(walk) <= step:
            value = walk[-1] + float(self._rngs[key].normal(0.0, self.drift.step))
            while not self._low <= value <= self._high:  # reflected at the bounds
                value = 2 * self._low - value if value < self._low else 2 * self._high - value
            walk.append(value)
        return math.exp(walk[step])


@dataclass
class LongRun:
    """What a simulated run's plans did."""

    workload: str
    num_ranks: int
    steps: int
    budget: int | None
    """The planner's communicator budget (None: unbounded)."""
    per_rank: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Distinct communicators each FCP rank joined."""
    growth: list[tuple[int, int]] = field(default_factory=list)
    """(step, worst rank's count) each time the worst rank's count grew."""
    step_ms: list[float] = field(default_factory=list, repr=False)
    """Each step's predicted time under FSDP (lockstep rounds, the step's own costs), on the base model."""
    planner_ms: list[float] = field(default_factory=list, repr=False)
    """Process time of planning each step, milliseconds."""
    new_communicators: list[int] = field(default_factory=list, repr=False)
    """Communicators each step used for the first time."""
    snapshots: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    """Steps -> `per_rank` after that many steps (the run's `checkpoints`)."""

    @property
    def worst(self) -> int:
        """The most distinct communicators one rank joined."""
        return int(self.per_rank.max()) if self.per_rank.size else 0


def simulate_long_run(cost: CostModel, config: SolverConfig, workload: str, steps: int, *,
                      samples_per_rank: int = 8, seed: int = 0, drift: Drift | None = None,
                      checkpoints: tuple[int, ...] = ()) -> LongRun:
    """`steps` planned steps of `workload` batches of `samples_per_rank` x N samples on `config`'s ranks; with `drift`,
    recalibrated from group times that drift (module docstring). `checkpoints`: step counts after which each rank's
    count is kept (`LongRun.snapshots`)."""
    if steps < 1 or samples_per_rank < 1:
        raise ValueError(f"steps and samples_per_rank must be positive, got {steps} and {samples_per_rank}")
    batch_size = samples_per_rank * config.num_ranks
    batches: dict[int, tuple[list[int], list[int]]] = {}

    def batch(step: int) -> tuple[list[int], list[int]]:
        if step not in batches:
            lengths, patches = draw_lengths(workload, batch_size, seed=seed * 1_000_003 + step)
            batches.clear()   # steps are asked for in order: only the current one is kept
            batches[step] = (lengths.tolist(), patches.tolist())
        return batches[step]

    recalibrator = StepRecalibrator(cost) if drift is not None else None
    truth = DriftingFactors(drift) if drift is not None else None
    source = StepPlanSource(BatchPlanner(cost, config, None), lambda step: batch(step)[0], RunSteps(0, steps),
                            async_planning=False, recalibrator=recalibrator, batch_patches=lambda step: batch(step)[1])
    run = LongRun(workload, config.num_ranks, steps, config.budget,
                  per_rank=np.zeros(config.num_ranks, dtype=np.int64))
    seen: set[tuple[int, ...]] = set()
    with source:
        for step in range(steps):
            started = time.process_time()
            plan = source.plan(step).plan
            run.planner_ms.append((time.process_time() - started) * 1e3)
            new = plan_communicators(plan) - seen
            for members in new:
                run.per_rank[list(members)] += 1
            seen |= new
            run.new_communicators.append(len(new))
            if step + 1 in checkpoints:
                run.snapshots[step + 1] = run.per_rank.copy()
            worst = int(run.per_rank.max())
            if not run.growth or worst > run.growth[-1][1]:
                run.growth.append((step, worst))
            run.step_ms.append(step_ms(plan, cost, LOCKSTEP))
            if truth is not None:
                lengths, patches = batch(step)
                source.record_measured(step, _drifted_times(plan, lengths, patches, cost, truth, step))
    return run


def _drifted_times(plan: Plan, lengths: list[int], patches: list[int], cost: CostModel, truth: DriftingFactors,
                   step: int) -> list[list[float]]:
    """Each group's time as a run would measure it: the base model's time of its samples at its degree and algo,
    where it is placed (and in its hybrid split), times the true factor of that (degree, algo) at `step` (idle
    groups: 0)."""
    node = int(plan.extras.get("ranks_per_node", cost.ranks_per_node))
    return [[0.0 if g.algo == IDLE else
             float(cost.group_time_ms(cost.workload([lengths[i] for i in g.samples], [patches[i] for i in g.samples]),
                                      g.degree, g.algo, node_part=placed_node_part(g.ranks[0], g.degree, node),
                                      ulysses_degree=None if g.hybrid is None else g.hybrid.ulysses_degree))
             * truth.factor(step, g.degree, g.algo)
             for g in round_plan.groups] for round_plan in plan.rounds]


__all__ = ["Drift", "DriftingFactors", "LongRun", "simulate_long_run"]
