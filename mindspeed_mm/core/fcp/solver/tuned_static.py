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
  least-loaded one (`static_layout.independent_rounds`).
Both add the optimizer step (`step_time`).
Tuning picks the (degree, algo) with the lowest total over the run's batches: it sees the very
batches it is scored on, so it is, if anything, better than what a user could tune.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.baselines import RING, ULYSSES, BaselineInfeasibleError, static_layout_plan
from mindspeed_mm.core.fcp.solver.plan import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.static_layout import static_degrees
from mindspeed_mm.core.fcp.solver.step_time import INDEPENDENT, LOCKSTEP, step_ms

__all__ = ["INDEPENDENT", "LOCKSTEP", "TunedStatic", "best_layout", "static_degrees", "tune_static"]


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


def best_layout(batches: Sequence[tuple[np.ndarray, np.ndarray | None]], cost: CostModel,
                layouts: Sequence[tuple[int, str]], plan_one: Callable[..., Plan], semantics: str) -> TunedStatic | None:
    """Of `layouts` ((degree, algo) pairs), the one whose plans (`plan_one(lengths, patches, degree, algo)` per batch)
    have the lowest total step time under `semantics`; None when none can run every batch."""
    best: TunedStatic | None = None
    for degree, algo in layouts:
        try:
            plans = tuple(plan_one(lengths, patches, degree, algo) for lengths, patches in batches)
        except BaselineInfeasibleError:
            continue
        steps = tuple(step_ms(p, cost, semantics) for p in plans)
        if best is None or sum(steps) < sum(best.step_ms):
            best = TunedStatic(degree, algo, plans, steps)
    return best


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
    layouts = [(degree, algo) for algo in algos for degree in static_degrees(longest, cost, config, algo)]
    best = best_layout(batches, cost, layouts, lambda lengths, patches, degree, algo: static_layout_plan(
        lengths, cost, config, patches, cp_degree=degree, algo=algo, semantics=semantics), semantics)
    if best is None:
        raise BaselineInfeasibleError(f"no static (degree, algo) among {list(algos)} holds the run's longest sample "
                                      f"({longest} tokens) on {config.num_ranks} ranks")
    return best
