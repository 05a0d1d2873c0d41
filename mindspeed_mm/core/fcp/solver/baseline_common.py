"""Pieces every baseline shares: checks, timed groups placed on ranks, rounds, the plan with its bound."""
from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel, GroupWorkload
from mindspeed_mm.core.fcp.solver.errors import InfeasibleSampleError
from mindspeed_mm.core.fcp.solver.expert_phases import priced_with_expert_exchange
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer, SampleWorkloads
from mindspeed_mm.core.fcp.solver.hybrid_split import with_hybrid_splits
from mindspeed_mm.core.fcp.solver.lower_bound import step_lower_bound
from mindspeed_mm.core.fcp.solver.memory_checks import warn_if_state_sharded_wider
from mindspeed_mm.core.fcp.solver.placement import placed_node_part
from mindspeed_mm.core.fcp.solver.plan import LOCKSTEP, GroupPlan, Plan, RoundPlan, SolverConfig
from mindspeed_mm.core.fcp.solver.rounds import min_rounds
from mindspeed_mm.core.fcp.solver.lengths import checked_sample_lengths
from mindspeed_mm.core.fcp.solver.vision_phases import priced_in_phases

RING = "ring"
ULYSSES = "ulysses"


class BaselineInfeasibleError(ValueError):
    """A baseline strategy cannot run this batch on this cluster; the message names the reason."""


def own_degree_lengths(strategy: str, chooses: str, lengths: Sequence[int], cost: CostModel, config: SolverConfig,
                       patches: Sequence[int] | None, cp_degree: int | None) -> np.ndarray:
    """`checked_lengths` of a strategy that chooses its degrees itself (`chooses`: "a degree per sample", ...),
    which refuses a `cp_degree`."""
    if cp_degree is not None:
        raise ValueError(f"{strategy} chooses {chooses}; cp_degree must be None")
    return checked_lengths(lengths, cost, config, patches)


def checked_lengths(
    lengths: Sequence[int], cost: CostModel, config: SolverConfig, patches: Sequence[int] | None
) -> np.ndarray:
    """The batch as int64, after the checks every planner applies."""
    values = checked_sample_lengths(lengths)
    if patches is not None and len(patches) != values.size:
        raise ValueError(f"patches has {len(patches)} entries for {values.size} samples")
    warn_if_state_sharded_wider(cost, config.num_ranks)
    limit = config.degree_limit
    for index in np.flatnonzero(values > limit * cost.capacity_tokens):
        raise InfeasibleSampleError(int(index), int(values[index]), cost.capacity_tokens, limit, config.num_ranks)
    return values


def sample_workload(
    cost: CostModel, samples: Sequence[int], lengths: np.ndarray, patches: Sequence[int] | None
) -> GroupWorkload:
    return cost.workload(
        [int(lengths[s]) for s in samples], None if patches is None else [int(patches[s]) for s in samples]
    )


def placed_group(
    first_rank: int,
    degree: int,
    algo: str,
    samples: Sequence[int],
    lengths: np.ndarray,
    patches: Sequence[int] | None,
    cost: CostModel,
    ranks_per_node: int,
    workload: GroupWorkload | None = None,
) -> GroupPlan:
    """A group on ranks first_rank.. timed by the cost model where it is placed (`workload` if
    already aggregated)."""
    if workload is None:
        workload = sample_workload(cost, samples, lengths, patches)
    part = placed_node_part(first_rank, degree, ranks_per_node)
    predicted = float(cost.group_time_ms(workload, degree, algo, node_part=part))
    return GroupPlan(
        ranks=tuple(range(first_rank, first_rank + degree)),
        degree=degree,
        algo=algo,
        samples=tuple(sorted(samples)),
        predicted_ms=predicted,
    )


def rank_block(index: int, degree: int) -> tuple[int, ...]:
    """Ranks of the index-th block of `degree` contiguous ranks."""
    return tuple(range(index * degree, (index + 1) * degree))


def round_of(groups: Sequence[GroupPlan]) -> RoundPlan:
    ordered = tuple(sorted(groups, key=lambda g: g.ranks[0]))
    return RoundPlan(groups=ordered, predicted_ms=max(g.predicted_ms for g in ordered))


def batch_lower_bound(
    lengths: np.ndarray, cost: CostModel, config: SolverConfig, patches: Sequence[int] | None
) -> float:
    """The planner's lower bound for this batch, so every strategy is measured against the same bound."""
    values = [int(x) for x in lengths]
    extra = None if patches is None else [int(p) for p in patches]
    workloads = SampleWorkloads(cost, np.asarray(values, dtype=np.int64),
                                None if extra is None else np.asarray(extra, dtype=np.int64))
    timer = GroupTimer(cost, config.degree_limit)
    rounds = min_rounds(values, config.num_ranks, cost.capacity_tokens)
    return step_lower_bound(cost, workloads, values, extra, timer, config.num_ranks, rounds)


def baseline_plan(
    rounds: Sequence[RoundPlan],
    lengths: np.ndarray,
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None,
    started: float,
    extras: dict[str, object],
    semantics: str = LOCKSTEP,
) -> Plan:
    """The baseline's plan of `rounds`; in lockstep rounds with vision work, priced in phases, each group
    encoding its own media (`vision_phases`), and with expert parallelism as its blocks run them (`expert_phases`)."""
    bound = batch_lower_bound(lengths, cost, config, patches)
    plan = Plan(
        rounds=tuple(rounds),
        predicted_ms=float(sum(r.predicted_ms for r in rounds)),
        lower_bound_ms=float(bound),
        solver_ms=0.0,
        num_ranks=config.num_ranks,
        extras={**extras, "ranks_per_node": config.ranks_per_node},
    )
    if semantics == LOCKSTEP and patches is not None and any(patches):
        plan = priced_in_phases(plan, lengths, patches, cost, config.ranks_per_node, over_round=False)
    if semantics == LOCKSTEP:
        plan = priced_with_expert_exchange(plan, lengths, cost)
    plan = with_hybrid_splits(plan, lengths, cost)
    return dataclasses.replace(plan, solver_ms=(time.perf_counter() - started) * 1e3)
