"""Node-aligned alternative of a round whose placement left a group across a node boundary.

The search prices a group of d <= ranks_per_node ranks as if it sat inside one node; when the round's
degrees cannot be packed into nodes (6 + 4 + 6 on two nodes of 8), placement makes one cross and the
planner re-prices it at the inter-node cost. This module offers the other way out: the same groups on
node-aligned degrees (powers of two up to a node, then whole numbers of nodes of a power-of-two
count), which always pack. Each group starts at the smallest aligned degree that holds it and the
slowest group is doubled while ranks are left; when the doubling cannot use up exactly all ranks, the
smallest group that can doubles to fill them. The planner keeps whichever round is faster as placed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel


def aligned_degrees(
    cost: "CostModel", workloads: Sequence[object], min_degrees: Sequence[int], num_ranks: int, top_degree: int,
    ranks_per_node: int,
) -> tuple[list[int], list[float], list[str]] | None:
    """(degrees, times, algos) of the groups on power-of-two degrees summing to `num_ranks`, or None
    (node size not a power of two, or the aligned degrees do not fit)."""
    if ranks_per_node & (ranks_per_node - 1):
        return None
    degrees = [1 << max(0, int(m) - 1).bit_length() for m in min_degrees]
    if sum(degrees) > num_ranks or max(degrees) > top_degree:
        return None

    def best(k: int, degree: int) -> tuple[float, str]:
        times, index = cost.best_time_ms(workloads[k], np.array([degree]))
        return float(times[0]), cost.algos[int(index[0])]

    chosen = [best(k, d) for k, d in enumerate(degrees)]
    free = num_ranks - sum(degrees)
    while free:
        # Slowest group whose doubling fits; on a tie the smaller group (cheaper to double).
        order = sorted(range(len(degrees)), key=lambda k: (-chosen[k][0], degrees[k], k))
        k = next((k for k in order if degrees[k] <= free and 2 * degrees[k] <= top_degree), None)
        if k is None:
            return None
        free -= degrees[k]
        degrees[k] *= 2
        chosen[k] = best(k, degrees[k])
    if not all(np.isfinite(t) for t, _ in chosen):
        return None
    return degrees, [t for t, _ in chosen], [a for _, a in chosen]
