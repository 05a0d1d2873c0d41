"""Huawei's HDP as the issue that asks for it describes it (cann-recipes-train; its code was not at hand): one static
CP group of C ranks per replica, and per micro-batch the group's ranks cut into contiguous sub-rings of any size,
sized by token count, ring attention only.

Modelled here on FCP's cost model:
- the replicas' micro-batches are upstream's dynamic batching (`mindspeed_mm_runs.token_budget_micro_batches`):
  each replica's samples, in order, filled up to what its C ranks hold;
- per micro-batch, its samples go into at most C sub-rings (the longest first, each to the sub-ring with the fewest
  tokens; fewer sub-rings where their memory needs, each rounded up to whole ranks, would exceed C), and the C
  ranks are shared out in proportion to the sub-rings' tokens (largest remainders), each sub-ring at least one
  rank and at least the ranks its tokens need in memory; a micro-batch lasts as long as its slowest sub-ring;
- the replicas run micro-batch k together (FSDP), a replica without one sits the round out.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.baseline_common import (
    RING,
    BaselineInfeasibleError,
    baseline_plan,
    checked_lengths,
    placed_group,
    round_of,
)
from mindspeed_mm.core.fcp.solver.mindspeed_mm_runs import token_budget_micro_batches
from mindspeed_mm.core.fcp.solver.plan import IDLE, GroupPlan, Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.static_layout import static_degrees
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP
from mindspeed_mm.core.fcp.solver.tuned_static import TunedStatic, best_layout


def sub_rings(samples: Sequence[int], lengths: np.ndarray, ranks: int, capacity: int) -> list[tuple[tuple[int, ...], int]]:
    """(samples, ranks) of each sub-ring of one micro-batch on a CP group of `ranks` ranks (module docstring)."""
    order = sorted(samples, key=lambda i: (-int(lengths[i]), i))
    for count in range(min(ranks, len(order)), 0, -1):
        members: list[list[int]] = [[] for _ in range(count)]
        tokens = [0] * count
        for i in order:
            k = min(range(count), key=lambda b: (tokens[b], b))
            members[k].append(i)
            tokens[k] += int(lengths[i])
        need = [max(1, -(-t // capacity)) for t in tokens]
        if sum(need) <= ranks:  # else fewer sub-rings round up fewer partial ranks
            break
    else:
        raise BaselineInfeasibleError(f"hdp: a micro-batch of {sum(tokens)} tokens does not fit a CP group of {ranks} "
                                      f"ranks at {capacity} tokens per rank")
    total = sum(tokens)
    share = [ranks * t / total for t in tokens]
    sizes = [max(n, int(s)) for n, s in zip(need, share)]
    # Largest remainders take the ranks left (or give back the ranks taken above the share, smallest first).
    by_remainder = sorted(range(count), key=lambda b: (-(share[b] - int(share[b])), b))
    k = 0
    while sum(sizes) < ranks:
        sizes[by_remainder[k % count]] += 1
        k += 1
    while sum(sizes) > ranks:
        b = max((b for b in range(count) if sizes[b] > need[b]), key=lambda b: (sizes[b] - share[b], -b))
        sizes[b] -= 1
    return [(tuple(sorted(m)), size) for m, size in zip(members, sizes)]


def hdp_plan(lengths: Sequence[int], cost: CostModel, config: SolverConfig, patches: Sequence[int] | None = None,
             *, cp_degree: int) -> Plan:
    """HDP on static CP groups of `cp_degree` ranks (module docstring)."""
    started = time.perf_counter()
    values = checked_lengths(lengths, cost, config, patches)
    if config.num_ranks % cp_degree or cp_degree > config.degree_limit:
        raise BaselineInfeasibleError(f"hdp: CP degree {cp_degree} must divide {config.num_ranks} ranks and be at "
                                      f"most {config.degree_limit}")
    replicas = config.num_ranks // cp_degree
    capacity = cost.capacity_tokens
    per_replica = [token_budget_micro_batches(list(range(r, values.size, replicas)), values, cp_degree * capacity)
                   for r in range(replicas)]
    rounds = []
    for k in range(max(len(m) for m in per_replica)):
        groups: list[GroupPlan] = []
        for replica, batches in enumerate(per_replica):
            first = replica * cp_degree
            if k >= len(batches):
                groups.extend(GroupPlan((rank,), 1, IDLE, (), 0.0) for rank in range(first, first + cp_degree))
                continue
            for samples, size in sub_rings(batches[k], values, cp_degree, capacity):
                groups.append(placed_group(first, size, RING, samples, values, patches, cost, config.ranks_per_node))
                first += size
        rounds.append(round_of(groups))
    return baseline_plan(rounds, values, cost, config, patches, started,
                         {"strategy": "hdp", "cp_degree": cp_degree, "algo": RING})


def hdp_run(batches: Sequence[tuple[np.ndarray, np.ndarray | None]], cost: CostModel,
            config: SolverConfig) -> TunedStatic:
    """HDP at the CP degree with the lowest total step time over the run's batches, under FSDP."""
    longest = max(int(lengths.max()) for lengths, _ in batches)
    layouts = [(degree, RING) for degree in static_degrees(longest, cost, config, RING)]
    best = best_layout(batches, cost, layouts, lambda lengths, patches, degree, _: hdp_plan(
        lengths, cost, config, patches, cp_degree=degree), LOCKSTEP)
    if best is None:
        raise BaselineInfeasibleError(f"hdp: no CP degree holds the run's longest sample ({longest} tokens) on "
                                      f"{config.num_ranks} ranks")
    return best
