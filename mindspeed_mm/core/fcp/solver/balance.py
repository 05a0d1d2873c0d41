"""Longest-processing-time assignment with memory: each item, in the given order, goes to the bin
with the least load among those with room for it (ties: lowest bin index).

Shared by the round spread and the groupings of a round. A heap of bin loads gives the least-loaded
bin; bins without room for the current item are set aside and put back afterwards, bins without
room for any remaining item are dropped for good, and after `_MAX_SKIPS` misses in a row the
choice falls back to one vectorised scan over all bins, so a batch of nearly full bins costs
O(bins) once per item instead of a heap pass per full bin.
"""
from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

# Bins without room looked at through the heap before one vectorised scan takes over.
_MAX_SKIPS = 8


def least_loaded_assignment(
    order: Sequence[int],
    weights: Sequence[float],
    sizes: Sequence[int],
    rooms: Sequence[int],
    scales: Sequence[float] | None = None,
    loads: Sequence[float] | None = None,
) -> list[int] | None:
    """Bin of every item of `order` (same positions), or None when an item fits in no bin.

    Item i adds `weights[i] * scales[b]` to the load of its bin b (`scales` default 1; e.g. 1 / ranks
    for a load per rank) and takes `sizes[i]` of its room. `rooms[b]` and `loads[b]` (default 0) are
    the bins' starting room and load.
    """
    bins = len(rooms)
    room = [int(r) for r in rooms]
    load = [0.0] * bins if loads is None else [float(x) for x in loads]
    scale = [1.0] * bins if scales is None else [float(x) for x in scales]
    room_arr = np.array(room, dtype=np.int64)
    load_arr = np.array(load, dtype=np.float64)
    heap = [(load[b], b) for b in range(bins)]
    heapq.heapify(heap)
    order_sizes = np.fromiter((sizes[i] for i in order), dtype=np.int64, count=len(order))
    # smallest[j]: the smallest item from position j on; a bin with less room is of no further use.
    smallest = np.minimum.accumulate(order_sizes[::-1])[::-1].tolist() if len(order) else []
    out = [0] * len(order)
    for pos, i in enumerate(order):
        size = sizes[i]
        skipped: list[tuple[float, int]] = []
        chosen = -1
        while heap:
            entry_load, b = heap[0]
            if entry_load != load[b]:
                heapq.heappop(heap)   # stale: the bin was chosen by a scan and pushed anew
                continue
            if room[b] >= size:
                chosen = b
                heapq.heappop(heap)
                break
            heapq.heappop(heap)
            if room[b] >= smallest[pos]:
                skipped.append((entry_load, b))
            if len(skipped) > _MAX_SKIPS:
                chosen = _scan(room_arr, load_arr, size)
                break
        for entry in skipped:
            heapq.heappush(heap, entry)
        if chosen < 0:
            return None
        out[pos] = chosen
        load[chosen] += weights[i] * scale[chosen]
        room[chosen] -= size
        load_arr[chosen] = load[chosen]
        room_arr[chosen] = room[chosen]
        if pos + 1 < len(order) and room[chosen] >= smallest[pos + 1]:
            heapq.heappush(heap, (load[chosen], chosen))
    return out


def _scan(room: np.ndarray, load: np.ndarray, size: int) -> int:
    """Least-loaded bin with room for `size` (lowest index on ties), -1 if none."""
    fits = np.flatnonzero(room >= size)
    if fits.size == 0:
        return -1
    return int(fits[np.argmin(load[fits])])
