"""Megatron-Core dynamic CP as approximated here (power-of-two aligned ring groups, filled greedily).

Not a port of Megatron-LM's `hybrid_cp_schedule` (no equal-work buckets, early exit or trim, and it
balances on this project's cost model instead of seq^2 / cp); see `baselines` for the registry.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from mindspeed_mm.core.fcp.cost import CostModel, GroupWorkload
from mindspeed_mm.core.fcp.solver.baseline_common import (
    RING,
    BaselineInfeasibleError,
    baseline_plan,
    own_degree_lengths,
    placed_group,
    round_of,
    sample_workload,
)
from mindspeed_mm.core.fcp.solver.plan import Plan, RoundPlan, SolverConfig

@dataclass
class _OpenGroup:
    """A group being filled during one round of the Megatron-Core dynamic CP schedule."""

    degree: int
    samples: list[int]
    tokens: int
    workload: GroupWorkload
    time_ms: float


def _next_power_of_two(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def mcore_dynamic_cp(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int | None = None,
) -> Plan:
    """Megatron-Core dynamic CP: power-of-two aligned ring groups, filled greedily round by round."""
    started = time.perf_counter()
    values = own_degree_lengths("mcore_dynamic_cp", "a degree per sample", lengths, cost, config, patches, cp_degree)
    n = config.num_ranks
    if n & (n - 1):
        raise BaselineInfeasibleError(
            f"mcore_dynamic_cp: power-of-two aligned groups cannot tile {n} ranks (not a power of two)"
        )
    limit = 1 << (config.degree_limit.bit_length() - 1)
    degrees = [_next_power_of_two(cost.min_degree(int(length))) for length in values.tolist()]
    for index, degree in enumerate(degrees):
        if degree > limit:
            raise BaselineInfeasibleError(
                f"mcore_dynamic_cp: sample {index} ({int(values[index])} tokens) needs a power-of-two degree "
                f"{degree} above the largest allowed power of two {limit}"
            )
    single = [sample_workload(cost, [i], values, patches) for i in range(values.size)]
    remaining = sorted(range(values.size), key=lambda i: (-int(values[i]), i))
    rounds: list[RoundPlan] = []
    while remaining:
        groups: list[_OpenGroup] = []
        free = n
        deferred: list[int] = []
        for s in remaining:
            degree, length = degrees[s], int(values[s])
            if free >= degree:
                time_ms = float(cost.group_time_ms(single[s], degree, RING))
                groups.append(_OpenGroup(degree, [s], length, single[s], time_ms))
                free -= degree
                continue
            room = degree * cost.capacity_tokens - length
            fitting = [g for g in groups if g.degree == degree and g.tokens <= room]
            if not fitting:
                deferred.append(s)
                continue
            target = min(fitting, key=lambda g: g.time_ms)
            target.samples.append(s)
            target.tokens += length
            target.workload = target.workload + single[s]
            target.time_ms = float(cost.group_time_ms(target.workload, degree, RING))
        while free:
            # N is a power of two, so the free ranks are a multiple of the smallest degree.
            smallest = min(g.degree for g in groups)
            target = max((g for g in groups if g.degree == smallest), key=lambda g: g.time_ms)
            free -= target.degree
            target.degree *= 2
            target.time_ms = float(cost.group_time_ms(target.workload, target.degree, RING))
        # Descending power-of-two sizes laid out back to back are aligned to their own size.
        groups.sort(key=lambda g: -g.degree)
        placed, first = [], 0
        for g in groups:
            placed.append(placed_group(first, g.degree, RING, g.samples, values, patches, cost, config.ranks_per_node,
                                 g.workload))
            first += g.degree
        rounds.append(round_of(placed))
        remaining = deferred
    return baseline_plan(rounds, values, cost, config, patches, started, {"strategy": "mcore_dynamic_cp"})
