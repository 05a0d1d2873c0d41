"""Start groupings of one round, each as (members, owners, group count) for `RoundSolver.evaluated`.

Uniform packings (groups of about g ranks, samples balanced by their marginal time per rank), a
time-balanced LPT packing aimed at the round's work bound, stage 1's memory best-fit-decreasing
packing and one group per sample.
"""
from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.balance import least_loaded_assignment
from mindspeed_mm.core.fcp.solver.packing import best_fit_decreasing, merge_smallest
from mindspeed_mm.core.fcp.solver.round_types import RoundSolverView, assignment, sorted_grouping



def start_assignments(
    solver: RoundSolverView, sample_ids: Sequence[int], degrees: Sequence[int], packings: bool
) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """(members, owners, group count) of the start groupings:
    time-balanced LPT ones, uniform ones, then (with `packings`) the memory packing of stage 1
    and one group per sample. With `packings` (the thorough search), each grouping once."""
    seen: set[tuple[tuple[int, ...], ...]] = set()

    def fresh(groups: list[tuple[int, ...]]) -> bool:
        if tuple(groups) in seen:
            return False
        seen.add(tuple(groups))
        return True

    for fraction in solver.limits.bin_fractions if packings else ():
        groups = lpt_packing(solver, sample_ids, fraction)
        if groups is not None and fresh(groups):
            yield assignment(groups)
    by_work = solver.by_work(sample_ids)
    for degree in degrees:
        if degree <= solver.top_degree:
            packed = uniform_packing(solver, by_work, degree)
            if packed is not None and (not packings or fresh(sorted_grouping(packed[0], packed[1]))):
                yield packed
    if not packings:
        return
    if not solver.limits.bin_fractions:
        groups = lpt_packing(solver, sample_ids, 1.0)
        if groups is not None and fresh(groups):
            yield assignment(groups)
    stage_one = merge_smallest(
        best_fit_decreasing(sample_ids, solver.lengths, solver.capacity_tokens),
        solver.num_ranks, solver.top_degree, solver.capacity_tokens,
    )
    if stage_one is not None and fresh([g.samples for g in stage_one]):
        yield assignment([g.samples for g in stage_one])
    singletons = [(i,) for i in sorted(sample_ids)]
    # The most groups possible: needed when a degree cap leaves fewer groups unable to occupy
    # every rank.
    if len(singletons) <= solver.num_ranks and fresh(singletons):
        yield assignment(singletons)

def lpt_packing(solver: RoundSolverView, sample_ids: Sequence[int], bin_fraction: float) -> list[tuple[int, ...]] | None:
    """Time-balanced grouping aimed at the round's work bound tau = sum(device time) / N.

    A sample that needs several ranks (memory) or alone takes longer than tau on one rank gets
    its own group, and about device_time / tau ranks are set aside for it. The other samples
    are spread longest first over `bin_fraction` of the remaining ranks, each to the one-rank
    group with the least work that still has memory for it (else the one with the least work).
    """
    device = solver.facts.device_ms
    one_rank_ms = solver.facts.one_rank_ms
    tau = sum(device[i] for i in sample_ids) / solver.num_ranks
    alone: list[tuple[int, ...]] = []
    shared: list[int] = []
    reserved = 0
    for i in sample_ids:
        one_rank = one_rank_ms[i]
        if one_rank > tau or not math.isfinite(one_rank):
            alone.append((i,))
            need = solver.facts.min_degrees[i]
            reserved += max(need, math.ceil(device[i] / tau)) if tau > 0 else need
        else:
            shared.append(i)
    bins = min(len(shared), max(1, int((solver.num_ranks - reserved) * bin_fraction)))
    groups = sorted(alone)
    if shared:
        shared.sort(key=lambda i: (-one_rank_ms[i], i))
        chosen = least_loaded_assignment(shared, one_rank_ms, solver.lengths, [solver.capacity_tokens] * bins,
                                         overflow=True)
        if chosen is None:
            raise AssertionError("an assignment with overflow always places every item")
        groups = sorted(groups + sorted_grouping(np.array(shared), np.array(chosen)))
    if len(groups) > solver.num_ranks or solver.min_degree_sum(groups) > solver.num_ranks:
        return None
    return groups

def uniform_packing(solver: RoundSolverView, by_work: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Groups of about `degree` ranks. A sample that needs more ranks (memory) opens a group of
    its own minimum degree; the other ranks form N' // degree groups (more, narrower ones when
    the degree cap requires it; leftover ranks widen the first ones). The other samples go, most
    device time first (`by_work` order), to the group with the least time per rank that has
    memory for them, a sample adding its marginal time at `degree` ranks. Returns (members,
    owners, group count) as `RoundSolver.evaluated` takes them."""
    wide = solver.min_degrees[by_work] > degree
    own = np.sort(by_work[wide]).tolist()
    rest = by_work[~wide].tolist()
    free = solver.num_ranks - int(solver.min_degrees[own].sum())
    if free < 0 or (rest and free == 0):
        return None
    count = min(max(1, free // degree), len(rest)) if rest else 0
    if count and -(-free // count) > solver.top_degree:
        count = min(-(-free // solver.top_degree), len(rest))
    mins = solver.facts.min_degrees
    widths = [mins[i] for i in own] + [free // count + (1 if k < free % count else 0) for k in range(count)]
    rooms = [w * solver.capacity_tokens for w in widths]
    loads = [0.0] * len(widths)
    for k, i in enumerate(own):
        rooms[k] -= solver.lengths[i]
        loads[k] = solver.facts.device_ms[i] / widths[k]
    weights = solver.marginal_ms(degree)
    chosen = least_loaded_assignment(rest, weights, solver.lengths, rooms, [degree / w for w in widths], loads)
    if chosen is None:
        return None
    owners = np.array(list(range(len(own))) + chosen, dtype=np.int64)
    # Renumber the groups that received samples 0, 1, ...
    used = np.bincount(owners, minlength=len(widths)) > 0
    owners = (np.cumsum(used) - 1)[owners]
    return np.array(own + rest, dtype=np.int64), owners, int(used.sum())
