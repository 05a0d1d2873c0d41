"""Longest-processing-time assignment with memory: each item, in the given order, goes to the bin
with the least load among those with room for it (ties: lowest bin index).

Shared by the round spread, the groupings of a round and the static layouts' micro-batches; `largest_first`
deals items by size with it (a round's media to the ranks that encode them). Bins
that all start at one load take the first items one each, in index order, without a heap (each
item raises its bin above the untouched ones). Then one heap of (load, bin) serves while the least
loaded bin has room for each item in turn, as it mostly does. From the first item it has no room
for, two heaps keep it O(log bins) per step: bins with room for the current item sit in a heap by
load; a bin found without room moves to a heap by room, and moves back as soon as an item small
enough arrives. A bin without room for any remaining item is dropped for good once found without
room. Every bin with room for the current item is in the load heap, so the choice is exact.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import accumulate
from typing import Sequence


def least_loaded_assignment(
    order: Sequence[int],
    weights: Sequence[float],
    sizes: Sequence[int],
    rooms: Sequence[int],
    scales: Sequence[float] | None = None,
    loads: Sequence[float] | None = None,
    overflow: bool = False,
) -> list[int] | None:
    """Bin of every item of `order` (same positions), or None when an item fits in no bin.

    Item i adds `weights[i] * scales[b]` to the load of its bin b (`scales` default 1; e.g. 1 / ranks
    for a load per rank) and takes `sizes[i]` of its room. `rooms[b]` and `loads[b]` (default 0) are
    the bins' starting room and load. With `overflow`, an item that fits nowhere goes to the least
    loaded bin all the same (its room goes negative).
    """
    bins = len(rooms)
    room = [int(r) for r in rooms]
    load = [0.0] * bins if loads is None else [float(x) for x in loads]
    scale = [1.0] * bins if scales is None else [float(x) for x in scales]
    order_sizes = [sizes[i] for i in order]
    order_weights = [weights[i] for i in order]
    out: list[int] = []
    wave = _first_wave(order_weights, order_sizes, load, scale, room, out)
    by_load = [(load[b], b) for b in range(bins)]
    heapq.heapify(by_load)
    start = _while_the_least_loaded_has_room(order_weights, order_sizes, wave, by_load, room, scale, out)
    if start == len(order):
        return out
    for least, b in by_load:
        load[b] = least
    by_room: list[tuple[int, int]] = []   # (-room, bin) of bins set aside for lack of room
    # useful[j]: the least room a bin needs to be of use from position j on (the smallest item left;
    # nothing when items may overflow). Bins with less are dropped for good when found without room.
    if overflow:
        useful = [-(1 << 62)] * len(order)
    else:
        useful = list(accumulate(reversed(order_sizes), min))[::-1]
    append = out.append
    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
    for pos, (size, weight) in enumerate(zip(order_sizes[start:], order_weights[start:]), start=start):
        while by_room and -by_room[0][0] >= size:
            b = heappop(by_room)[1]
            heappush(by_load, (load[b], b))
        if by_load:
            least, b = by_load[0]
            left = room[b] - size
            if left >= 0:
                # Common case: the least-loaded bin has room (heap entries always hold current loads).
                room[b] = left
                least += weight * scale[b]
                load[b] = least
                append(b)
                heapreplace(by_load, (least, b))
                continue
        chosen = -1
        while by_load:
            b = by_load[0][1]
            if room[b] >= size:
                chosen = b
                break
            heappop(by_load)
            if room[b] >= useful[pos]:
                heappush(by_room, (-room[b], b))
        if chosen < 0:
            if not overflow:
                return None
            chosen = min(range(bins), key=lambda b: (load[b], b))
            by_load = [entry for entry in by_load if entry[1] != chosen]
            by_room = [entry for entry in by_room if entry[1] != chosen]
            heapq.heapify(by_load)
            heapq.heapify(by_room)
        append(chosen)
        load[chosen] += weight * scale[chosen]
        room[chosen] -= size
        if by_load and by_load[0][1] == chosen:
            heapreplace(by_load, (load[chosen], chosen))
        else:
            heappush(by_load, (load[chosen], chosen))
    return out


def _first_wave(weights: list[float], sizes: list[int], load: list[float], scale: list[float],
                room: list[int], out: list[int]) -> int:
    """Bins that all start at one load take the first items one each, in index order, while every item
    raises its bin's load and fits: the next untouched bin is then the least loaded. Updates `load`,
    `room` and `out`; returns the items dealt."""
    wave = 0
    if len(set(load)) != 1:
        return wave
    for size, weight in zip(sizes[:len(load)], weights[:len(load)]):
        raised = load[wave] + weight * scale[wave]
        if not (raised > load[wave] and room[wave] >= size):
            break
        room[wave] -= size
        load[wave] = raised
        out.append(wave)
        wave += 1
    return wave


def _while_the_least_loaded_has_room(weights: list[float], sizes: list[int], start: int,
                                     by_load: list[tuple[float, int]], room: list[int], scale: list[float],
                                     out: list[int]) -> int:
    """Items from `start` on, each to the least-loaded bin of the heap `by_load`, until one does not fit
    there; updates the heap, `room` and `out` and returns the position of that item (the end if none).
    No bin is set aside until then, so this is the exact rule with the loads kept in the heap only."""
    if not by_load:
        return start
    append, heapreplace = out.append, heapq.heapreplace
    for size, weight in zip(sizes[start:], weights[start:]):
        least, b = by_load[0]
        left = room[b] - size
        if left < 0:
            break
        room[b] = left
        append(b)
        heapreplace(by_load, (least + weight * scale[b], b))
    return len(out)


def largest_first(sizes: Sequence[int], bins: int,
                  choose: Callable[[int, Sequence[int]], int] | None = None) -> list[int]:
    """The bin of each item, the items dealt largest first (ties: lowest index): each to the least loaded bin (ties:
    lowest index), or to the bin `choose(item, loads)` picks from the bins' loads so far. A bin's load is the sum
    of its items' sizes. The same on every rank that calls it with the same sizes."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    owners = [0] * len(sizes)
    if choose is None:
        dealt = least_loaded_assignment(order, sizes, [0] * len(sizes), [0] * bins)
        assert dealt is not None  # items of no size always find room
        for item, owner in zip(order, dealt):
            owners[item] = owner
        return owners
    loads = [0] * bins
    for item in order:
        owner = choose(item, loads)
        owners[item] = owner
        loads[owner] += sizes[item]
    return owners
