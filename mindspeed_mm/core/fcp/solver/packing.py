"""Stage 1: pack one round's samples into atomic groups that fit in memory.

A group of degree d holds at most d * capacity_tokens tokens (memory is additive over the packed
documents). Best-fit-decreasing keeps the number of ranks the packing needs small: samples are
placed longest first, each into the open group whose spare capacity fits it most tightly; when none
fits it opens a group of its own minimum degree.
"""
from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class AtomicGroup:
    """Samples that will run together as one packed batch on one group."""

    samples: tuple[int, ...]
    """Sample indices, ascending."""
    tokens: int
    """Total LLM tokens of the samples."""
    min_degree: int
    """Fewest ranks whose memory holds `tokens`."""


def min_degree_for(tokens: int, capacity_tokens: int) -> int:
    """ceil(tokens / capacity_tokens), at least 1."""
    return max(1, -(-tokens // capacity_tokens))


def best_fit_decreasing(
    sample_ids: Sequence[int], lengths: Sequence[int], capacity_tokens: int
) -> list[AtomicGroup]:
    """Packs `sample_ids` into groups of minimal degree, best fit, longest sample first.

    Ties in length are broken by sample index, so the result is deterministic. Groups are returned in
    the order they were opened (longest first sample first).
    """
    order = sorted(sample_ids, key=lambda i: (-lengths[i], i))
    members: list[list[int]] = []
    capacity: list[int] = []
    used: list[int] = []
    # Open groups sorted by (spare tokens, group id): the first entry whose spare is >= the sample's
    # length is the tightest fit.
    spare_index: list[tuple[int, int]] = []
    for i in order:
        length = lengths[i]
        pos = bisect.bisect_left(spare_index, (length, -1))
        if pos < len(spare_index):
            spare, g = spare_index.pop(pos)
            members[g].append(i)
            used[g] += length
        else:
            g = len(members)
            degree = min_degree_for(length, capacity_tokens)
            members.append([i])
            capacity.append(degree * capacity_tokens)
            used.append(length)
        bisect.insort(spare_index, (capacity[g] - used[g], g))
    return [
        AtomicGroup(tuple(sorted(m)), used[g], min_degree_for(used[g], capacity_tokens))
        for g, m in enumerate(members)
    ]


def merge_smallest(
    groups: Sequence[AtomicGroup], num_ranks: int, max_degree: int, capacity_tokens: int
) -> list[AtomicGroup] | None:
    """Merges the two smallest groups (by tokens) until the groups fit on `num_ranks` ranks.

    Fitting means at most `num_ranks` groups whose minimum degrees sum to at most `num_ranks`.
    Returns None when that cannot be reached without a group above `max_degree`.
    """
    heap = [(g.tokens, g.samples, g) for g in groups]
    heapq.heapify(heap)
    total_min = sum(g.min_degree for g in groups)
    while len(heap) > num_ranks or total_min > num_ranks:
        if len(heap) < 2:
            return None
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        tokens = a.tokens + b.tokens
        merged = AtomicGroup(tuple(sorted(a.samples + b.samples)), tokens, min_degree_for(tokens, capacity_tokens))
        if merged.min_degree > max_degree:
            return None
        total_min += merged.min_degree - a.min_degree - b.min_degree
        heapq.heappush(heap, (merged.tokens, merged.samples, merged))
    return sorted((entry[2] for entry in heap), key=lambda g: g.samples)
