"""Whole-step start layouts for large batches: every round at once, for one group size.

For group size g the batch is spread over rounds x (N // g) groups of g ranks in one
least-loaded pass (a sample that needs more ranks gets a group of its own minimum degree); the
groups are then ranked by time and dealt to the rounds in that order, so that the slowest groups
share a round -- the step takes the sum of the round makespans, and a round whose slowest group is
set by an unsplittable long sample is best filled with the other slow groups. Each round then gets
its optimal degrees (`RoundSolver.evaluated`).

A cheap estimate of every size's step time orders the sizes to try and skips those that cannot win.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.balance import least_loaded_assignment
from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver, RoundStart


def step_estimates(solver: RoundSolver, rounds: int, degrees: Sequence[int]) -> list[float]:
    """Per group size g: the step time if the work of the samples that fit g ranks were split
    evenly over the groups of g ranks that `rounds` rounds leave beside the samples that need more
    (each on its minimum degree), rounds x (F + (T(those samples, g) - F) / groups), F the time of an
    empty group (memory ignored otherwise), with no round faster than the slowest sample it holds
    alone (`_slowest_alone`). A start of size g rarely beats it (inf: no room for the groups)."""
    mins = solver.min_degrees
    # Group k < len(degrees): the samples that fit degrees[k] ranks; the last group: empty.
    fits = mins[None, :] <= np.asarray(degrees)[:, None]
    rows, members = np.nonzero(fits)
    workloads, _ = solver.facts.workloads.assigned(members, rows, len(degrees) + 1)
    top = max(degrees)
    times, _ = solver.memory_free_timer().evaluate(workloads, [1] * (len(degrees) + 1), top, top)
    empty = times[-1]
    out = []
    for k, d in enumerate(degrees):
        groups = (rounds * solver.num_ranks - int(mins[~fits[k]].sum())) / d
        if groups < 1:
            out.append(float("inf"))
            continue
        work = times[k, d - 1] - empty[d - 1] if fits[k].any() else 0.0
        # A round's makespan with its share of the work over its groups of d ranks.
        balanced = float(empty[d - 1] + work / groups)
        out.append(sum(max(balanced, slowest) for slowest in _slowest_alone(solver, d, rounds, balanced)))
    return out


def _slowest_alone(solver: RoundSolver, degree: int, rounds: int, balanced: float) -> list[float]:
    """Per round: the slowest sample it holds alone, among the samples that need more than `degree`
    ranks (on their minimum degree) or alone take longer than `balanced` (on `degree` ranks: device
    time / ranks), dealt slowest first to the first round with ranks left (0 where a round gets none;
    inf everywhere when they do not fit)."""
    ranks = np.maximum(solver.min_degrees, degree)
    alone = solver.device_ms / ranks
    heavy = np.flatnonzero((solver.min_degrees > degree) | (alone > balanced))
    slowest = [0.0] * rounds
    room = [solver.num_ranks] * rounds
    for i in heavy[np.lexsort((heavy, -alone[heavy]))].tolist():
        width = int(ranks[i])
        r = next((r for r in range(rounds) if room[r] >= width), -1)
        if r < 0:
            return [float("inf")] * rounds
        room[r] -= width
        slowest[r] = max(slowest[r], float(alone[i]))
    return slowest


def joint_starts(solver: RoundSolver, rounds: int, degree: int) -> list[RoundStart] | None:
    """The start of every round for group size `degree` (see the module docstring). The samples that
    fit go most device time first, each to the group with the least time that has memory for it, a
    sample adding its marginal time at `degree` ranks (scaled by degree / ranks in the wider groups
    of the samples that need more). None when memory or the ranks do not allow it, or a round would
    get no sample."""
    capacity = solver.capacity_tokens
    lengths = solver.lengths
    by_work = solver.by_work(range(len(lengths)))
    wide = solver.min_degrees[by_work] > degree
    own = by_work[wide]
    rest = by_work[~wide].tolist()
    widths = solver.min_degrees[own].tolist()
    uniform = (rounds * solver.num_ranks - sum(widths)) // degree
    if uniform < 0 or (rest and uniform == 0):
        return None
    weights = solver.marginal_ms(degree)
    rooms = [w * capacity - lengths[i] for w, i in zip(widths, own.tolist())] + [degree * capacity] * uniform
    loads = [float(solver.device_ms[i]) / w for w, i in zip(widths, own.tolist())] + [0.0] * uniform
    scales = [degree / w for w in widths] + [1.0] * uniform
    chosen = least_loaded_assignment(rest, weights, lengths, rooms, scales, loads)
    if chosen is None:
        return None
    widths += [degree] * uniform
    slots = len(widths)
    members = np.concatenate([own, np.asarray(rest, dtype=np.int64)])
    slot_of = np.concatenate([np.arange(len(own)), np.asarray(chosen, dtype=np.int64)])
    load = np.asarray(loads)
    if rest:
        load += np.bincount(slot_of[len(own):], weights=np.asarray(weights)[rest], minlength=slots) * np.asarray(scales)
    round_of_slot = _deal(load, widths, np.bincount(slot_of, minlength=slots) > 0, rounds, solver.num_ranks)
    if round_of_slot is None:
        return None
    round_of = round_of_slot[slot_of]
    starts = []
    for r in range(rounds):
        here = round_of == r
        if not here.any():
            return None
        used, owners = np.unique(slot_of[here], return_inverse=True)
        start = solver.evaluated(members[here], owners.astype(np.int64), int(used.size))
        if start is None:
            return None
        starts.append(start)
    return starts


def _deal(load: np.ndarray, widths: list[int], filled: np.ndarray, rounds: int, num_ranks: int) -> np.ndarray | None:
    """Round of every filled group: slowest first (ties: lowest index), each to the first round with
    ranks left for it; None when one fits nowhere."""
    round_of = np.full(load.size, -1, dtype=np.int64)
    room = [num_ranks] * rounds
    for slot in np.lexsort((np.arange(load.size), -load)).tolist():
        if not filled[slot]:
            continue
        r = next((r for r in range(rounds) if room[r] >= widths[slot]), -1)
        if r < 0:
            return None
        round_of[slot] = r
        room[r] -= widths[slot]
    return round_of
