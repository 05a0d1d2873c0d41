"""Baseline layouts on the FCP cost model: what existing context-parallel systems run for a batch.

Each baseline returns the same `Plan` type as the FCP planner, timed by the same `CostModel`, so
validation, simulation and reports treat all strategies alike.

- ``megatron_static_cp``: Megatron-LM ring CP with a degree fixed for the whole run (the smallest
  divisor of N whose groups hold the run's longest sample), DP = N / CP. Each replica packs several
  samples per micro-batch (THD packed sequences) up to CP x capacity tokens. All replicas run the
  same number of micro-batches (rounds): the fewest that hold the batch; samples are spread over
  the rounds x DP micro-batches longest first, each to the least-loaded one with room, and the
  slowest micro-batches share a round. A round lasts as long as its slowest replica. This spread
  is balanced on purpose (Megatron's own packer fills packs in input order and is slower), so
  the speedups measured against it are conservative.
- ``deepspeed_ulysses``: the same layout with Ulysses all-to-all attention; the degree must also
  divide the attention heads.
- ``mcore_dynamic_cp``: Megatron-Core dynamic CP: each sample gets the power-of-two degree that
  holds it; per round, longest first, a sample opens a new group while ranks are free, otherwise
  joins the least-loaded group of its degree that has memory left, otherwise waits for the next
  round. Ranks left free at the end of a round are absorbed by doubling the smallest groups.
  Groups are power-of-two sized and aligned.
- ``megatron_hybrid_cp``: Megatron-LM's hybrid CP scheduler re-implemented rule for rule (see
  `megatron_hybrid_cp`): power-of-two degrees, per round equal-work buckets of the longest-first
  queue, new groups while ranks are free, else the least-loaded group of the degree with room,
  early exit once balanced, trim, and doubling of the smallest groups, all decided on Megatron's
  own estimate seq^2 / cp; only the resulting ring groups are timed on the cost model.
- ``mindspeed_dp_cp_switch``: MindSpeed-MM dynamic DP/CP switch: one homogeneous DP x CP layout
  per step, the first feasible CP in increasing order (most DP), then the same spread as above.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.baseline_common import (
    RING,
    ULYSSES,
    BaselineInfeasibleError,
    baseline_plan,
    checked_lengths,
    own_degree_lengths,
)
from mindspeed_mm.core.fcp.solver.mcore_dynamic import mcore_dynamic_cp
from mindspeed_mm.core.fcp.solver.megatron_hybrid_cp import megatron_hybrid_cp
from mindspeed_mm.core.fcp.solver.plan import INDEPENDENT, LOCKSTEP, STEP_SEMANTICS, Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.static_layout import StaticPacker, independent_rounds, lockstep_rounds

__all__ = ["BASELINES", "RING", "ULYSSES", "Baseline", "BaselineInfeasibleError", "BaselinePlanner",
           "deepspeed_ulysses", "get_baseline", "mcore_dynamic_cp", "megatron_hybrid_cp", "megatron_static_cp",
           "mindspeed_dp_cp_switch", "static_cp_degree", "static_layout_plan"]

class BaselinePlanner(Protocol):
    """Signature shared by the baselines (`cp_degree` is only used by static strategies)."""

    def __call__(
        self,
        lengths: Sequence[int],
        cost: CostModel,
        config: SolverConfig,
        patches: Sequence[int] | None = None,
        *,
        cp_degree: int | None = None,
    ) -> Plan: ...


@dataclass(frozen=True)
class Baseline:
    """A registered baseline strategy."""

    name: str
    """Registry name, as used on the command line."""
    planner: BaselinePlanner
    """Builds the strategy's plan for one global batch."""
    static_algo: str | None
    """For static strategies, the algo whose CP degree is fixed for a whole run; None if per batch."""


def static_cp_degree(max_length: int, cost: CostModel, config: SolverConfig, algo: str) -> int:
    """Smallest CP degree of a homogeneous DP x CP layout that holds a sample of `max_length` tokens.

    The degree must divide N (DP = N / CP), respect the maximum degree and, for Ulysses, divide the
    attention heads. Raises BaselineInfeasibleError when no degree qualifies.
    """
    needed = cost.min_degree(int(max_length))
    candidates = [
        d
        for d in range(max(needed, 1), config.degree_limit + 1)
        if config.num_ranks % d == 0 and cost.runs_at(algo, d)
    ]
    if not candidates:
        heads = " that Ulysses supports (divides the heads)" if algo == ULYSSES else ""
        raise BaselineInfeasibleError(
            f"no {algo} CP degree between {needed} (to hold {max_length} tokens at {cost.capacity_tokens} "
            f"tokens per rank) and {config.degree_limit} divides {config.num_ranks} ranks{heads}"
        )
    return candidates[0]


def _homogeneous_plan(
    lengths: np.ndarray,
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None,
    degree: int,
    algo: str,
    strategy: str,
    started: float,
    semantics: str = LOCKSTEP,
) -> Plan:
    if config.num_ranks % degree != 0 or degree > config.degree_limit:
        raise BaselineInfeasibleError(
            f"{strategy}: CP degree {degree} must divide {config.num_ranks} ranks and be at most "
            f"{config.degree_limit}"
        )
    if not cost.runs_at(algo, degree):
        raise BaselineInfeasibleError(f"{strategy}: {algo.capitalize()} cannot split the attention heads over {degree} ranks")
    longest = int(np.argmax(lengths))
    if cost.min_degree(int(lengths[longest])) > degree:
        raise BaselineInfeasibleError(
            f"{strategy}: sample {longest} ({int(lengths[longest])} tokens) does not fit CP degree {degree} "
            f"at {cost.capacity_tokens} tokens per rank"
        )
    replicas = config.num_ranks // degree
    packs = StaticPacker(lengths, patches, cost).packs(degree, algo, replicas)
    arrange = independent_rounds if semantics == INDEPENDENT else lockstep_rounds
    rounds = arrange(packs, replicas, lengths, patches, cost, config.ranks_per_node)
    extras = {"strategy": strategy, "cp_degree": degree, "dp_degree": replicas}
    return baseline_plan(rounds, lengths, cost, config, patches, started, extras, semantics)


def static_layout_plan(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int,
    algo: str,
    semantics: str,
) -> Plan:
    """A static layout of `cp_degree` and `algo` (`static_layout`), its replicas run in lockstep rounds
    (LOCKSTEP, as `megatron_static_cp` / `deepspeed_ulysses`) or independently (INDEPENDENT)."""
    started = time.perf_counter()
    if semantics not in STEP_SEMANTICS:
        raise ValueError(f"semantics must be one of {', '.join(STEP_SEMANTICS)}, got {semantics!r}")
    values = checked_lengths(lengths, cost, config, patches)
    strategy = "megatron_static_cp" if algo == RING else "deepspeed_ulysses"
    return _homogeneous_plan(values, cost, config, patches, cp_degree, algo, strategy, started, semantics)


def _static_cp(algo: str, strategy: str, doc: str) -> BaselinePlanner:
    """The baseline of a static CP of `algo`: `cp_degree` is the run's degree (default: sized for this batch)."""
    def baseline(lengths: Sequence[int], cost: CostModel, config: SolverConfig,
                 patches: Sequence[int] | None = None, *, cp_degree: int | None = None) -> Plan:
        started = time.perf_counter()
        values = checked_lengths(lengths, cost, config, patches)
        degree = cp_degree if cp_degree is not None else static_cp_degree(int(values.max()), cost, config, algo)
        return _homogeneous_plan(values, cost, config, patches, degree, algo, strategy, started)

    baseline.__name__ = baseline.__qualname__ = strategy
    baseline.__doc__ = doc
    return baseline


megatron_static_cp = _static_cp(RING, "megatron_static_cp", "Megatron-LM static ring CP; `cp_degree` is the run's "
                                "degree (default: sized for this batch).")
deepspeed_ulysses = _static_cp(ULYSSES, "deepspeed_ulysses", "DeepSpeed-Ulysses static CP; `cp_degree` is the run's "
                               "degree (default: sized for this batch).")


def mindspeed_dp_cp_switch(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int | None = None,
) -> Plan:
    """MindSpeed-MM dynamic DP/CP switch: per batch, the smallest ring CP (most DP) that fits."""
    started = time.perf_counter()
    values = own_degree_lengths("mindspeed_dp_cp_switch", "its CP degree per batch", lengths, cost, config, patches, cp_degree)
    degree = static_cp_degree(int(values.max()), cost, config, RING)
    return _homogeneous_plan(values, cost, config, patches, degree, RING, "mindspeed_dp_cp_switch", started)


BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("megatron_static_cp", megatron_static_cp, RING),
        Baseline("deepspeed_ulysses", deepspeed_ulysses, ULYSSES),
        Baseline("mcore_dynamic_cp", mcore_dynamic_cp, None),
        Baseline("megatron_hybrid_cp", megatron_hybrid_cp, None),
        Baseline("mindspeed_dp_cp_switch", mindspeed_dp_cp_switch, None),
    )
}
"""Baseline strategies by name."""


def get_baseline(name: str) -> Baseline:
    """The baseline registered as `name`; ValueError listing the known names otherwise."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline strategy {name!r}; choose one of {', '.join(BASELINES)}")
    return BASELINES[name]
