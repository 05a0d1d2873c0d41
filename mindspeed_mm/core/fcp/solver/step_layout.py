"""Whole-step start layouts for large batches: every round at once, for one group size.

For group size g, a sample that needs more ranks (memory) or that alone would outlast a balanced
round gets a group of its own, about wide enough to end with the others (`own_groups`); the ranks
the rounds have beside those form groups of g ranks. The other samples are spread over all those
groups in one least-loaded pass. The groups are then ranked by time and dealt to the rounds in that
order, so that the slowest groups share a round: the step takes the sum of the round makespans,
and a round whose slowest group is set by an unsplittable long sample is best filled with the other
slow groups. Each round then gets its optimal degrees (`RoundSolver.evaluated_together`). Where the own
groups hold much of the ranks, the planner also tries each size with them closed to the other samples
(`joint_starts(closed=True)`).

A cheap estimate of every size's step time (`step_estimates`) orders the sizes to try and skips
those that cannot win.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.balance import least_loaded_assignment
from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver
from mindspeed_mm.core.fcp.solver.round_types import RoundStart

# Own groups closed to the other samples pay off when they hold much of the ranks. On image + video and
# OpenVid batches (64-1024 ranks) closed starts were faster in 11 of the 15 where the own groups held
# 34-75% of the ranks (by up to 7.6%) and in 1 of the 10 where they held 1-14% (by 0.1%); below this
# share the planner does not spend the second start.
_CLOSED_MIN_SHARE = 0.25


def step_estimates(solver: RoundSolver, rounds: int, degrees: Sequence[int]) -> list[float]:
    """Per group size g: with own groups (`own_groups`) sized against the round makespan of the whole
    batch split evenly (`_balanced`), the step time if the samples without a group of their own
    were split evenly over the groups of g ranks the rounds have beside those (`_balanced`) and no
    round ran faster than the slowest own group dealt to it (own groups dealt slowest first to the
    first round with ranks left). A start of size g rarely beats it, so it orders the sizes to try and
    skips those that cannot win (inf: no room for the groups)."""
    first = _balanced(solver, rounds, degrees)
    own = [own_groups(solver, d, balanced, rounds) for d, balanced in zip(degrees, first)]
    second = _balanced(solver, rounds, degrees, [mask for mask, _ in own], [widths for _, widths in own])
    out = []
    for d, balanced, (mask, widths) in zip(degrees, second, own):
        if not np.isfinite(balanced):
            out.append(float("inf"))
            continue
        alone = solver.device_ms[mask] / widths
        slowest = [0.0] * rounds
        room = [solver.num_ranks] * rounds
        for k in np.lexsort((np.arange(alone.size), -alone)).tolist():
            r = _first_with_room(room, int(widths[k]))
            if r < 0:
                slowest = [float("inf")] * rounds
                break
            room[r] -= int(widths[k])
            slowest[r] = max(slowest[r], float(alone[k]))
        out.append(sum(max(balanced, t) for t in slowest))
    return out


def own_groups(solver: RoundSolver, degree: int, balanced: float, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """(mask of the samples that get a group of their own for group size `degree`, the ranks of those
    groups): the samples that need more than `degree` ranks (memory) or whose device time over
    `degree` ranks exceeds `balanced`, on max(minimum degree, device time / balanced) ranks (capped at
    the top degree). When those groups would leave the other samples less than the ranks their memory
    needs (at least one group of `degree`), they shrink towards their minimum degrees."""
    mins = solver.min_degrees
    need = mins if not np.isfinite(balanced) else np.maximum(
        mins, np.ceil(solver.device_ms / balanced).astype(np.int64))
    mask = need > degree
    widths = np.minimum(need[mask], solver.top_degree)
    rest_tokens = int(solver.length_array[~mask].sum()) if not mask.all() else 0
    rest_ranks = max(degree, -(-rest_tokens // solver.capacity_tokens)) if rest_tokens else 0
    budget = rounds * solver.num_ranks - rest_ranks
    if widths.sum() > budget:
        floor = mins[mask]
        spare = max(0, budget - int(floor.sum()))
        extra = widths - floor
        widths = floor + (extra * spare // max(1, int(extra.sum())))
    return mask, widths


def _balanced(solver: RoundSolver, rounds: int, degrees: Sequence[int], apart: list[np.ndarray] | None = None,
              apart_ranks: list[np.ndarray] | None = None) -> list[float]:
    """Per group size g = degrees[k]: a round's makespan if the work of the samples not in apart[k]
    (default: none apart) were split evenly over the groups of g ranks that `rounds` rounds leave
    beside those samples (apart_ranks[k] ranks each, default their minimum degree): F + (T(the rest,
    g) - F) / groups, F the time of an empty group (memory ignored); inf when no group of g ranks is
    left or no algo runs on g ranks."""
    if apart is None:
        whole, empty = solver.whole_batch_ms()
        # A size no algo runs (Ulysses alone on a degree that does not split the heads) costs inf.
        return [float(empty[d - 1] + (whole[d - 1] - empty[d - 1]) / (rounds * solver.num_ranks / d))
                if rounds * solver.num_ranks >= d and np.isfinite(empty[d - 1]) else float("inf") for d in degrees]
    # Group k < len(degrees): the samples outside apart[k]; the last group: empty.
    workloads = solver.facts.workloads.outside(np.stack([*apart, np.ones(len(solver.lengths), dtype=bool)]))
    top = max(degrees)
    times, _ = solver.memory_free_timer().evaluate(workloads, [1] * (len(degrees) + 1), top, top)
    empty = times[-1]
    out = []
    for k, d in enumerate(degrees):
        taken = solver.min_degrees[apart[k]] if apart_ranks is None else apart_ranks[k]
        groups = (rounds * solver.num_ranks - int(taken.sum())) / d
        if groups < 1 or not np.isfinite(empty[d - 1]):
            out.append(float("inf"))
            continue
        work = times[k, d - 1] - empty[d - 1] if not apart[k].all() else 0.0
        out.append(float(empty[d - 1] + work / groups))
    return out


def joint_starts(solver: RoundSolver, rounds: int, degree: int, closed: bool = False) -> list[RoundStart] | None:
    """The start of every round for group size `degree` (see the module docstring). The samples
    without a group of their own (`own_groups`) go most device time first, each to the group with the
    least time that has memory for it, a sample adding its marginal time at `degree` ranks (scaled by
    degree / ranks in the own groups); `closed`: to the groups of `degree` ranks only (None unless the
    own groups hold at least `_CLOSED_MIN_SHARE` of the rounds' ranks). None when memory or the ranks
    do not allow it, or a round would get no sample."""
    capacity = solver.capacity_tokens
    lengths = solver.lengths
    by_work = solver.all_by_work
    balanced = _balanced(solver, rounds, [degree])[0]
    mask, own_ranks = own_groups(solver, degree, balanced, rounds)
    wide = mask[by_work]
    own = by_work[wide]
    rest_ids = by_work[~wide]
    rest = rest_ids.tolist()
    # own_groups lists the ranks in sample order; here the samples go in `by_work` order.
    ranks_of = np.zeros(len(lengths), dtype=np.int64)
    ranks_of[mask] = own_ranks
    widths = ranks_of[own].tolist()
    if closed and sum(widths) < _CLOSED_MIN_SHARE * rounds * solver.num_ranks:
        return None
    uniform = (rounds * solver.num_ranks - sum(widths)) // degree
    if uniform < 0 or (rest and uniform == 0):
        return None
    weights = solver.marginal_ms(degree)
    weight_array = solver.marginal_array(degree)
    own_rooms = [0 if closed else w * capacity - lengths[i] for w, i in zip(widths, own.tolist())]
    rooms = own_rooms + [degree * capacity] * uniform
    loads = [float(solver.device_ms[i]) / w for w, i in zip(widths, own.tolist())] + [0.0] * uniform
    scales = [degree / w for w in widths] + [1.0] * uniform
    chosen = least_loaded_assignment(rest, weights, lengths, rooms, scales, loads)
    if chosen is None:
        return None
    widths += [degree] * uniform
    slots = len(widths)
    members = np.concatenate([own, rest_ids])
    slot_of = np.concatenate([np.arange(len(own)), np.fromiter(chosen, dtype=np.int64, count=len(chosen))])
    load = np.asarray(loads)
    if rest:
        load += np.bincount(slot_of[len(own):], weights=weight_array[rest_ids], minlength=slots) * np.asarray(scales)
    round_of = _deal(load, widths, np.bincount(slot_of, minlength=slots) > 0, rounds, solver.num_ranks)[slot_of]
    groupings = []
    for r in range(rounds):
        here = round_of == r
        if not here.any():
            return None
        slots_here = slot_of[here]
        # The round's groups renumbered 0, 1, ... in slot order.
        used = np.bincount(slots_here, minlength=slots) > 0
        owners = (np.cumsum(used) - 1)[slots_here]
        groupings.append((members[here], owners, int(np.count_nonzero(used))))
    starts = solver.evaluated_together(groupings)
    return None if any(start is None for start in starts) else starts


def _deal(load: np.ndarray, widths: list[int], filled: np.ndarray, rounds: int, num_ranks: int) -> np.ndarray:
    """Round of every filled group: slowest first (ties: lowest index), each to the first round with
    ranks left for its nominal width, else to the round with the most ranks left (the groups' real
    minimum degrees, checked when the round is evaluated, are often below their nominal widths)."""
    round_of = [-1] * load.size
    room = [num_ranks] * rounds
    order = np.lexsort((np.arange(load.size), -load))
    for slot in order[filled[order]].tolist():
        width = widths[slot]
        r = _first_with_room(room, width)
        if r < 0:
            r = max(range(rounds), key=lambda r: (room[r], -r))
        round_of[slot] = r
        room[r] -= width
    return np.array(round_of, dtype=np.int64)


def _first_with_room(room: list[int], width: int) -> int:
    """The first round with at least `width` ranks left, -1 if none."""
    for r, left in enumerate(room):
        if left >= width:
            return r
    return -1
