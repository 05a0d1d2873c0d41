"""Rounds: how many forward+backward passes a step takes, and which samples go in each.

All ranks run the same number of rounds R. R is at least the memory bound ceil(total tokens /
(N * capacity)). Two spreads are offered: LPT (longest device time first, each sample to the
least-loaded round whose memory still holds it), which balances the rounds, and `fill_rounds`, which
loads the rounds that a long sample makes long anyway, as the step time is the sum of the rounds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.balance import least_loaded_assignment
from mindspeed_mm.core.fcp.solver.errors import no_plan_error, too_few_rounds_error

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver


def min_rounds(lengths: Sequence[int], num_ranks: int, capacity_tokens: int) -> int:
    """Fewest rounds whose combined memory holds every token of the batch."""
    total = sum(lengths)
    return max(1, -(-total // (num_ranks * capacity_tokens)))


def round_counts(
    lengths: Sequence[int], num_ranks: int, capacity_tokens: int, max_rounds: int | None, extra: int
) -> list[int]:
    """The R values to try: the memory bound and up to `extra` more, within [1, len(lengths)] and
    `max_rounds`."""
    first = min_rounds(lengths, num_ranks, capacity_tokens)
    last = min(first + extra, len(lengths))
    if max_rounds is not None:
        if first > max_rounds:
            raise too_few_rounds_error(max_rounds, first, sum(lengths), num_ranks, capacity_tokens)
        last = min(last, max_rounds)
    return list(range(first, max(first, last) + 1))


def spread_over_rounds(
    device_ms: Sequence[float],
    lengths: Sequence[int],
    num_rounds: int,
    round_capacity_tokens: int,
    min_samples: int = 1,
) -> list[list[int]] | None:
    """LPT spread of samples over `num_rounds` rounds by device time, within each round's memory.

    Every round gets at least `min_samples` samples (a round needs ceil(N / max_degree) groups to
    occupy all N ranks). Returns the sample indices per round (ascending), or None when memory or
    the sample count does not allow `num_rounds` rounds.
    """
    if len(lengths) < num_rounds * min_samples:
        return None
    if num_rounds == 1:
        return [list(range(len(lengths)))] if sum(lengths) <= round_capacity_tokens else None
    order = np.lexsort((np.arange(len(lengths)), -np.asarray(lengths), -np.asarray(device_ms))).tolist()
    rounds = least_loaded_assignment(order, device_ms, lengths, [round_capacity_tokens] * num_rounds)
    if rounds is None:
        return None
    members: list[list[int]] = [[] for _ in range(num_rounds)]
    tokens = [0] * num_rounds
    for i, r in zip(order, rounds):
        members[r].append(i)
        tokens[r] += lengths[i]
    return _with_min_samples(members, tokens, device_ms, lengths, round_capacity_tokens, min_samples)


def fill_rounds(
    device_ms: Sequence[float],
    lengths: Sequence[int],
    anchors: Sequence[int],
    anchor_ms: Sequence[float],
    num_ranks: int,
    round_capacity_tokens: int,
    min_samples: int = 1,
) -> list[list[int]] | None:
    """Spread for a sum of round makespans: fill the rounds that are long anyway.

    Each anchor sample (longest first) opens one round; a round cannot end before its anchor's
    shortest time `anchor_ms`, so it offers about N * anchor_ms rank-ms for free. The other samples,
    longest device time first, go to the first round with enough free rank-ms and memory, else to
    the round with the most free rank-ms.
    """
    num_rounds = len(anchors)
    if len(lengths) < num_rounds * min_samples:
        return None
    members = [[i] for i in anchors]
    free = [num_ranks * t - device_ms[i] for i, t in zip(anchors, anchor_ms)]
    tokens = [lengths[i] for i in anchors]
    chosen = set(anchors)
    for i in sorted(range(len(lengths)), key=lambda i: (-device_ms[i], -lengths[i], i)):
        if i in chosen:
            continue
        fits = [r for r in range(num_rounds) if tokens[r] + lengths[i] <= round_capacity_tokens]
        if not fits:
            return None
        room = [r for r in fits if free[r] >= device_ms[i]]
        r = room[0] if room else max(fits, key=lambda r: (free[r], -r))
        members[r].append(i)
        free[r] -= device_ms[i]
        tokens[r] += lengths[i]
    return _with_min_samples(members, tokens, device_ms, lengths, round_capacity_tokens, min_samples)


def _with_min_samples(
    members: list[list[int]],
    tokens: list[int],
    device_ms: Sequence[float],
    lengths: Sequence[int],
    round_capacity_tokens: int,
    min_samples: int,
) -> list[list[int]] | None:
    """Moves the shortest samples from rounds with spare samples to rounds with too few."""
    for r in range(len(members)):
        while len(members[r]) < min_samples:
            movable = [(device_ms[i], i, d) for d in range(len(members)) if len(members[d]) > min_samples
                       for i in members[d] if tokens[r] + lengths[i] <= round_capacity_tokens]
            if not movable:
                return None
            _, i, d = min(movable)
            members[d].remove(i)
            members[r].append(i)
            tokens[d] -= lengths[i]
            tokens[r] += lengths[i]
    return [sorted(m) for m in members if m]


def round_limit(lengths: list[int], max_rounds: int | None) -> int:
    """The most rounds a batch may take: one sample each at most, and `max_rounds`."""
    return min(len(lengths), max_rounds) if max_rounds is not None else len(lengths)


def no_plan(solver: "RoundSolver", lengths: list[int], n_ranks: int, capacity: int,
             max_rounds: int | None) -> ValueError:
    """The error of a batch without a plan, naming what the user can change (`errors.no_plan_error`)."""
    allowed = solver.timer.allowed_degrees()
    widest = max(d for d in allowed if d <= solver.top_degree)
    return no_plan_error(len(lengths), min_rounds(lengths, n_ranks, capacity), n_ranks, widest, capacity, max_rounds)
