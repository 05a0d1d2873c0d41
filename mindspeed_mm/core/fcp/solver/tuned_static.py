"""Static layouts a careful user would pick: the best (CP degree, algo) for a whole run.

A static DP x CP layout fixes one degree d (dividing N, holding the run's longest sample) and one
attention algo for the run. The default launch takes the smallest such degree; a user who tunes
tries them all. Two execution semantics of the same layout:
- lockstep (FSDP / ZeRO-3): every layer's parameter all-gather spans all ranks, so the replicas run
  micro-batch r together and a round lasts as long as its slowest replica (the `Plan`'s rounds), and
  at least its parameter traffic;
- independent replicas (DDP / distributed optimizer): a replica runs its micro-batches back to back
  and waits only at the step's gradient reduction, so the step lasts as long as the busiest
  replica, plus the reduction; the micro-batches are dealt to replicas longest first, each to the
  least-loaded one.
Both add the optimizer step (`step_time`).
Tuning picks the (degree, algo) with the lowest total over the run's batches: it sees the very
batches it is scored on, so it is, if anything, better than what a user could tune.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.baselines import (
    RING,
    ULYSSES,
    BaselineInfeasibleError,
    deepspeed_ulysses,
    megatron_static_cp,
)
from mindspeed_mm.core.fcp.solver.plan import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.step_time import INDEPENDENT, LOCKSTEP, fsdp_step_ms, replicas_step_ms


def static_degrees(longest: int, cost: CostModel, config: SolverConfig, algo: str) -> list[int]:
    """Every degree a static layout of `algo` may use for a run whose longest sample is `longest`."""
    first = cost.min_degree(int(longest))
    return [d for d in range(first, config.degree_limit + 1)
            if config.num_ranks % d == 0 and (algo != ULYSSES or cost.ulysses_supported(d))]


def independent_replicas_ms(plan: Plan) -> float:
    """Step time of a homogeneous plan when its replicas meet only at the gradient reduction: its
    micro-batches dealt longest first to the least-loaded of the N / degree replicas."""
    degree = plan.rounds[0].groups[0].degree
    replicas = plan.num_ranks // degree
    loads = [0.0] * replicas
    heapq.heapify(loads)
    for t in sorted((g.predicted_ms for r in plan.rounds for g in r.groups), reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + t)
    return max(loads)


def static_step_ms(plan: Plan, semantics: str, cost: CostModel) -> float:
    """Step time of a homogeneous plan under `semantics` (LOCKSTEP or INDEPENDENT), with the step's own
    costs (`step_time`)."""
    if semantics == LOCKSTEP:
        return fsdp_step_ms(plan, cost)
    if semantics == INDEPENDENT:
        return replicas_step_ms(independent_replicas_ms(plan), cost)
    raise ValueError(f"semantics must be {LOCKSTEP!r} or {INDEPENDENT!r}, got {semantics!r}")


@dataclass(frozen=True)
class TunedStatic:
    """The best static layout of a run and its per-batch plans and step times."""

    degree: int
    """The run's CP degree."""
    algo: str
    """The run's attention algo."""
    plans: tuple[Plan, ...]
    """One homogeneous plan per batch."""
    step_ms: tuple[float, ...]
    """Step time of each batch under the chosen semantics."""


def tune_static(
    batches: Sequence[tuple[np.ndarray, np.ndarray | None]],
    cost: CostModel,
    config: SolverConfig,
    semantics: str,
    algos: Sequence[str] = (RING, ULYSSES),
) -> TunedStatic:
    """The (degree, algo) with the lowest total step time over `batches`; BaselineInfeasibleError
    when no static layout holds the run."""
    longest = max(int(lengths.max()) for lengths, _ in batches)
    best: TunedStatic | None = None
    for algo in algos:
        planner = megatron_static_cp if algo == RING else deepspeed_ulysses
        for degree in static_degrees(longest, cost, config, algo):
            try:
                plans = tuple(planner(lengths, cost, config, patches, cp_degree=degree) for lengths, patches in batches)
            except BaselineInfeasibleError:
                continue
            steps = tuple(static_step_ms(p, semantics, cost) for p in plans)
            if best is None or sum(steps) < sum(best.step_ms):
                best = TunedStatic(degree, algo, plans, steps)
    if best is None:
        raise BaselineInfeasibleError(f"no static (degree, algo) among {list(algos)} holds the run's longest sample "
                                      f"({longest} tokens) on {config.num_ranks} ranks")
    return best
