"""Node-aligned alternative of a round whose placement left a group across a node boundary.

The search prices a group of d <= ranks_per_node ranks as if it sat inside one node; when the round's
degrees cannot be packed into nodes (6 + 4 + 6 on two nodes of 8), placement makes one cross and the
planner re-prices it at the inter-node cost. This module offers the other way out: the same groups on
node-aligned degrees (powers of two up to a node, then whole numbers of nodes of a power-of-two
count), which always pack (`power_of_two_degrees`; the slot grid's fallback too). Each group starts at the smallest aligned degree that holds it and the
slowest group is doubled while ranks are left; when the doubling cannot use up exactly all ranks, the
smallest group that can doubles to fill them. The planner keeps whichever round is faster as placed.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel


def aligned_degrees(
    cost: "CostModel", workloads: Any, min_degrees: Sequence[int], num_ranks: int, top_degree: int,
    ranks_per_node: int,
) -> tuple[list[int], list[float], list[str]] | None:
    """(degrees, times, algos) of the groups (`workloads` as `CostModel.best_time_table` takes them) on
    power-of-two degrees summing to `num_ranks`, or None (node size not a power of two, or the aligned
    degrees do not fit)."""
    if ranks_per_node & (ranks_per_node - 1):
        return None
    return power_of_two_degrees(cost, workloads, min_degrees, num_ranks, top_degree)


def power_of_two_degrees(
    cost: "CostModel", workloads: Any, min_degrees: Sequence[int], num_ranks: int, top_degree: int,
) -> tuple[list[int], list[float], list[str]] | None:
    """(degrees, times, algos) of the groups on powers of two up to `top_degree` summing to `num_ranks` (they always
    pack on the slot grid and, with a power-of-two node size, into nodes), or None where they do not fit."""
    degrees = [1 << max(0, int(m) - 1).bit_length() for m in min_degrees]
    if sum(degrees) > num_ranks or max(degrees) > top_degree:
        return None
    # Every group's times on its start degree and on each doubling up to the top degree, in one query
    # (columns past the top degree are clipped to it and never read).
    doublings = np.left_shift(1, np.arange(max(1, (top_degree // min(degrees)).bit_length())))
    times, algos = cost.best_time_table(workloads, np.minimum(np.array(degrees)[:, None] * doublings, top_degree))
    level = [0] * len(degrees)
    free = num_ranks - sum(degrees)
    # Slowest group whose doubling fits first; on a tie the smaller group (cheaper to double), then
    # the lower index. A group that does not fit never will: the free ranks only shrink.
    slowest = [(-float(times[k, 0]), d, k) for k, d in enumerate(degrees)]
    heapq.heapify(slowest)
    while free:
        while slowest and not (slowest[0][1] <= free and 2 * slowest[0][1] <= top_degree):
            heapq.heappop(slowest)
        if not slowest:
            return None
        _, degree, k = slowest[0]
        free -= degree
        degrees[k] = 2 * degree
        level[k] += 1
        heapq.heapreplace(slowest, (-float(times[k, level[k]]), degrees[k], k))
    chosen = [float(times[k, j]) for k, j in enumerate(level)]
    if not all(np.isfinite(chosen)):
        return None
    return degrees, chosen, [cost.algos[int(algos[k, j])] for k, j in enumerate(level)]
