"""Local search of one round: changes around its slowest group, kept while they lower the makespan.

Each step tries to split the slowest group, pull one of its samples out, merge it with a fast group,
move one of its samples to a fast group, or merge the two fastest groups to free ranks for it, and
keeps the best improving change (or the first, with the limits' `first_improvement`).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from mindspeed_mm.core.fcp.solver.degree_dp import beats, optimal_makespan, realise
from mindspeed_mm.core.fcp.solver.round_types import CandidateGroup, RoundSolverView


# A change must shorten the round by more than this fraction to count as an improvement.
_IMPROVEMENT_RTOL = 1e-9
# Extra degree columns kept for local-search moves that free ranks (a merge frees at most one).
MOVE_MARGIN = 2


def improve(solver: RoundSolverView, groups: list[CandidateGroup], makespan: float, window: int) -> list[CandidateGroup]:
    """The groups after at most the limits' `max_moves` improving changes (and at most
    `max_evaluations` candidates evaluated); the groups given when none improves."""
    evaluations = 0
    for _ in range(solver.limits.max_moves):
        built = solver.time_matrix(groups, window, margin=MOVE_MARGIN)
        if built is None or evaluations >= solver.limits.max_evaluations:
            break
        base, spare = built
        extra = realise(base, spare, makespan)
        times = base[np.arange(len(groups)), extra]
        moves = list(neighbours(solver, groups, int(np.argmax(times)), times))
        moves = moves[: solver.limits.max_evaluations - evaluations]
        evaluations += len(moves)
        solver.known_groups([g for _, added in moves for g in added], window + MOVE_MARGIN)
        target = makespan * (1 - _IMPROVEMENT_RTOL)
        best: tuple[float, list[CandidateGroup]] | None = None
        for removed, added in moves:
            built = moved_matrix(solver, groups, base, spare, removed, solver.known_groups(added), window)
            # One feasibility check rejects most candidates before the exact makespan is computed.
            if built is None or not beats(built[0], built[1], target):
                continue
            value = optimal_makespan(*built)
            if best is None or value < best[0]:
                best = (value, [g for k, g in enumerate(groups) if k not in removed] + solver.known_groups(added))
            if solver.limits.first_improvement:
                break
        if best is None:
            break
        makespan, groups = best
    return groups

def moved_matrix(solver: RoundSolverView, groups: list[CandidateGroup], base: np.ndarray, spare: int, removed: set[int],
                 added: list[CandidateGroup], window: int) -> tuple[np.ndarray, int] | None:
    """The time matrix after a move, from the current one (`base`, `spare`) without rebuilding it."""
    count = len(groups) - len(removed) + len(added)
    new_spare = spare + sum(groups[k].min_degree for k in removed) - sum(g.min_degree for g in added)
    if count > solver.num_ranks or new_spare < 0 or any(g.min_degree > solver.top_degree for g in added):
        return None
    width = min(new_spare + 1, window)
    if width > base.shape[1]:
        return solver.time_matrix([g for k, g in enumerate(groups) if k not in removed] + added, window)
    keep = np.ones(len(groups), dtype=bool)
    keep[list(removed)] = False
    return np.concatenate([base[keep, :width], solver.time_rows(added, width)]), new_spare

def neighbours(
    solver: RoundSolverView, groups: list[CandidateGroup], slow: int, times: np.ndarray
) -> Iterator[tuple[set[int], list[tuple[int, ...]]]]:
    """Moves as (indices of groups removed, sample tuples of groups added), all touching or
    helping the slowest group: split it in two, pull one of its samples out, merge it with a
    fast group, move one of its samples to a fast group, or merge the two fastest groups."""
    slowest = groups[slow].samples
    others = [int(k) for k in np.argsort(times, kind="stable") if k != slow]
    movers = sorted(slowest, key=lambda i: (solver.lengths[i], i))[: solver.limits.max_movers]
    if len(slowest) > 1:
        yield {slow}, list(split_two(solver, slowest))
        for i in movers:
            yield {slow}, [(i,), tuple(s for s in slowest if s != i)]
    for k in others[: solver.limits.max_targets]:
        target = groups[k].samples
        yield {slow, k}, [tuple(sorted(slowest + target))]
        for i in movers if len(slowest) > 1 else ():
            yield {slow, k}, [tuple(sorted(target + (i,))), tuple(s for s in slowest if s != i)]
    if len(others) >= 2:
        yield {others[0], others[1]}, [tuple(sorted(groups[others[0]].samples + groups[others[1]].samples))]

def split_two(solver: RoundSolverView, samples: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Splits samples in two halves of similar device time (longest first, to the lighter half)."""
    halves: tuple[list[int], list[int]] = ([], [])
    loads = [0.0, 0.0]
    for i in sorted(samples, key=lambda i: (-solver.facts.device_ms[i], i)):
        side = 0 if loads[0] <= loads[1] else 1
        halves[side].append(i)
        loads[side] += solver.facts.device_ms[i]
    return tuple(sorted(halves[0])), tuple(sorted(halves[1]))
