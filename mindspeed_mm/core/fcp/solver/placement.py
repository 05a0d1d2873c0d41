"""Placement: turn one round's group degrees into contiguous rank ranges, node-aware.

Rank r lives on node r // ranks_per_node. Groups larger than a node go first, from rank 0 (they span
nodes anyway): those of a whole number of nodes first, largest first, so that each sits on whole nodes
as the search priced it (an all-to-all pays for the ranks of its emptiest node; a ring does not care),
then the others, largest first. The groups that fit in a node are then packed into the free space of each
node -- the partial node after the large groups, then whole nodes -- so that none crosses a node
boundary: an exact bin packing (depth-first, largest first, bounded). When none exists, groups are laid
out node by node, largest that still fits first; where none fits, one group crosses a node boundary
(counted and logged): the smallest, or given the groups' times, the fastest (it has the most time to
spare for the inter-node cost).
The result depends only on the degrees (and the times given), so every rank computes the same placement.
`node_parts` tells the cost model where each group landed (`CostModel.group_time_ms`'s `node_part`), so a
group that crosses a node boundary is priced at the inter-node cost it pays.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

logger = logging.getLogger(__name__)

# Depth-first search steps allowed for the exact node packing before falling back to best fit. With
# 2,000 the plans of 120 batches (5 workloads x 8 seeds x 64 / 256 / 1024 ranks) were identical to those
# of 20,000, and image + video at 1024 ranks planned in 157 instead of 212 ms: the extra steps were
# spent on packings that have no exact solution.
_SEARCH_STEPS = 2_000


@dataclass(frozen=True)
class Placement:
    """First rank of every group (in input order) of one round."""

    starts: tuple[int, ...]
    """starts[k]: first rank of group k; it holds ranks starts[k] .. starts[k] + degree_k - 1."""
    straddling: int
    """Groups of at most ranks_per_node ranks that nevertheless cross a node boundary."""
    node_parts: tuple[int, ...] = ()
    """node_parts[k]: the fewest of group k's ranks on one node it touches (its degree when inside one node)."""


def placed_node_part(first_rank: int, degree: int, ranks_per_node: int) -> int:
    """The fewest of the ranks first_rank .. first_rank + degree - 1 on one node they touch."""
    last = first_rank + degree - 1
    first_node, last_node = first_rank // ranks_per_node, last // ranks_per_node
    if first_node == last_node:
        return degree
    head = (first_node + 1) * ranks_per_node - first_rank
    tail = last - last_node * ranks_per_node + 1
    return min(head, tail, ranks_per_node)


def compact_node_part(degree: int, ranks_per_node: int) -> int:
    """The node part the planner's search assumes for a group of `degree` ranks: inside one node when
    it fits, else whole nodes (the cost model's default pricing)."""
    return degree if degree <= ranks_per_node else ranks_per_node


def _placement(starts: list[int], degrees: Sequence[int], straddling: int, ranks_per_node: int) -> "Placement":
    parts = tuple(placed_node_part(s, d, ranks_per_node) for s, d in zip(starts, degrees))
    return Placement(tuple(starts), straddling, parts)


def place_groups(degrees: Sequence[int], num_ranks: int, ranks_per_node: int) -> Placement:
    """Contiguous, node-aware rank ranges for groups of these degrees (which must sum to num_ranks)."""
    return placements(degrees, num_ranks, ranks_per_node)[0]


def placements(degrees: Sequence[int], num_ranks: int, ranks_per_node: int,
               times: Sequence[float] | None = None) -> tuple[Placement, ...]:
    """`place_groups`'s placement, and where some groups must cross a node boundary and the groups'
    `times` are given, also the layout in which the fastest ones cross (when it differs)."""
    if sum(degrees) != num_ranks:
        raise ValueError(f"degrees sum to {sum(degrees)}, expected num_ranks={num_ranks}")
    if any(d < 1 for d in degrees):
        raise ValueError(f"degrees must be >= 1, got {list(degrees)}")
    starts = [0] * len(degrees)
    large = sorted((k for k, d in enumerate(degrees) if d > ranks_per_node),
                   key=lambda k: (degrees[k] % ranks_per_node != 0, -degrees[k], k))
    small = sorted((k for k, d in enumerate(degrees) if d <= ranks_per_node), key=lambda k: (-degrees[k], k))
    position = 0
    for k in large:
        starts[k] = position
        position += degrees[k]

    bins = _free_bins(position, num_ranks, ranks_per_node)
    small_sizes = [degrees[k] for k in small]
    assignment = _exact_packing(small_sizes, [size for _, size in bins])
    if assignment is not None:
        fill = [start for start, _ in bins]
        for item, b in enumerate(assignment):
            starts[small[item]] = fill[b]
            fill[b] += small_sizes[item]
        return (_placement(starts, degrees, 0, ranks_per_node),)
    by_size = _node_by_node(degrees, small, list(starts), position, num_ranks, ranks_per_node, None)
    if times is None or not by_size.straddling:
        return (by_size,)
    by_time = _node_by_node(degrees, small, starts, position, num_ranks, ranks_per_node, times)
    return (by_size,) if by_time == by_size else (by_size, by_time)


def _node_by_node(degrees: Sequence[int], small: list[int], starts: list[int], position: int, num_ranks: int,
                  ranks_per_node: int, times: Sequence[float] | None) -> Placement:
    """The `small` groups (largest first) laid out from `position` on, node by node, the largest that still
    fits this node first; where none fits, one crosses over: the smallest, or given `times`, the fastest."""
    straddling = 0
    remaining = list(small)
    while remaining:
        room = min((position // ranks_per_node + 1) * ranks_per_node, num_ranks) - position
        fitting = [k for k in remaining if degrees[k] <= room]
        if fitting:
            k = fitting[0]
        else:
            k = remaining[-1] if times is None else min(remaining, key=lambda k: (times[k], k))
            straddling += 1
        remaining.remove(k)
        starts[k] = position
        position += degrees[k]
    logger.debug("placement: %d group(s) of at most %d ranks cross a node boundary", straddling, ranks_per_node)
    return _placement(starts, degrees, straddling, ranks_per_node)


def _free_bins(first_free: int, num_ranks: int, ranks_per_node: int) -> list[tuple[int, int]]:
    """(start, size) of the free rank ranges, one per node, from `first_free` to the end."""
    bins = []
    start = first_free
    while start < num_ranks:
        end = min((start // ranks_per_node + 1) * ranks_per_node, num_ranks)
        bins.append((start, end - start))
        start = end
    return bins


def _exact_packing(sizes: list[int], capacities: list[int]) -> list[int] | None:
    """Bin of every item such that every bin is filled exactly, or None if none is found.

    Works on counts per size: bins are filled one after the other, each with a multiset of sizes
    that sums to its capacity (larger sizes tried first); failed (bin, counts) states are memoised.
    """
    distinct = sorted(set(sizes), reverse=True)
    counts = tuple(sizes.count(size) for size in distinct)
    if not _large_items_have_hosts(distinct, counts, capacities):
        return None
    failed: set[tuple[int, tuple[int, ...]]] = set()
    steps = 0

    def fillings(room: int, counts: tuple[int, ...], first: int):
        """Count vectors (per distinct size, from index `first`) summing to exactly `room`."""
        if room == 0:
            yield (0,) * (len(counts) - first)
            return
        if first == len(counts):
            return
        size = distinct[first]
        for take in range(min(counts[first], room // size), -1, -1):
            for tail in fillings(room - take * size, counts, first + 1):
                yield (take,) + tail

    def search(b: int, counts: tuple[int, ...]) -> list[tuple[int, ...]] | None:
        nonlocal steps
        if b == len(capacities):
            return [] if not any(counts) else None
        if (b, counts) in failed or steps > _SEARCH_STEPS:
            return None
        for taken in fillings(capacities[b], counts, 0):
            steps += 1
            rest = search(b + 1, tuple(c - t for c, t in zip(counts, taken)))
            if rest is not None:
                return [taken] + rest
            if steps > _SEARCH_STEPS:
                return None
        failed.add((b, counts))
        return None

    plan = search(0, counts)
    if plan is None:
        return None
    queues = {size: [item for item, s in enumerate(sizes) if s == size] for size in distinct}
    assignment = [0] * len(sizes)
    for b, taken in enumerate(plan):
        for size, count in zip(distinct, taken):
            for _ in range(count):
                assignment[queues[size].pop(0)] = b
    return assignment


def _large_items_have_hosts(distinct: list[int], counts: tuple[int, ...], capacities: list[int]) -> bool:
    """A necessary condition for an exact packing, cheap to check (it spares the search most packings
    that have none): an item of size s sits in a bin of capacity c >= s whose other items sum to
    c - s; an item larger than half of every bin shares its bin with no other item of its size, so
    there must be at least as many bins able to host one as there are such items."""
    widest = max(capacities, default=0)
    mask = (1 << (widest + 1)) - 1
    for size, count in zip(distinct, counts):
        if 2 * size <= widest:
            continue
        reachable = 1   # bit r: some multiset of the other items sums to r
        for other, available in zip(distinct, counts):
            for _ in range(min(available - (other == size), widest // other)):
                reachable = (reachable | reachable << other) & mask
        hosts = sum(1 for c in capacities if c >= size and reachable >> (c - size) & 1)
        if hosts < count:
            return False
    return True


def slot_of(degree: int) -> int:
    """The slot of a group of `degree` ranks on the aligned grid: the next power of two (a group of d ranks
    starts at a multiple of it)."""
    return 1 << max(0, degree - 1).bit_length()


def slot_grid_placement(degrees: Sequence[int], num_ranks: int, ranks_per_node: int) -> Placement | None:
    """Groups of these degrees (summing to num_ranks) on the aligned slot grid, or None where they do not fit.

    A group of d > 1 ranks starts at a multiple of `slot_of(d)` and fills the front of that slot; the rest of
    the slot holds smaller groups. Every rank is then in at most one group of each degree however the rounds
    differ: the range of the degree-d group holding rank r is fixed by r and d. Groups are placed largest slot
    first (then largest degree), each at the lowest multiple of its slot where its ranks are free (the groups
    placed before it start at multiples of its slot, so where its front is free its whole slot is, up to the
    plane's end); groups of one rank take the ranks left, in order. Power-of-two degrees summing to num_ranks
    always fit. With a power-of-two node size no group of at most a node's ranks crosses a node boundary.
    """
    if sum(degrees) != num_ranks:
        raise ValueError(f"degrees sum to {sum(degrees)}, expected num_ranks={num_ranks}")
    used = bytearray(num_ranks)
    starts = [0] * len(degrees)
    first_candidate: dict[tuple[int, int], int] = {}
    for k in sorted((k for k, d in enumerate(degrees) if d > 1),
                    key=lambda k: (-slot_of(degrees[k]), -degrees[k], k)):
        degree = degrees[k]
        slot = slot_of(degree)
        start = first_candidate.get((slot, degree), 0)
        while start + degree <= num_ranks and used.find(1, start, start + degree) != -1:
            start += slot
        if start + degree > num_ranks:
            return None
        used[start:start + degree] = b"\x01" * degree
        starts[k] = start
        first_candidate[(slot, degree)] = start + slot
    left = (rank for rank in range(num_ranks) if not used[rank])
    for k, degree in enumerate(degrees):
        if degree == 1:
            starts[k] = next(left)
    return placed_at(starts, degrees, ranks_per_node)


def placed_at(starts: Sequence[int], degrees: Sequence[int], ranks_per_node: int) -> Placement:
    """The placement of groups of these degrees at these first ranks, with those of at most a node's ranks that
    cross a node boundary counted."""
    straddling = sum(1 for s, d in zip(starts, degrees)
                     if d <= ranks_per_node and placed_node_part(s, d, ranks_per_node) != d)
    return _placement(list(starts), degrees, straddling, ranks_per_node)
