"""Rounds: how many forward+backward passes a step takes, and which samples go in each.

All ranks run the same number of rounds R. R is at least the memory bound ceil(total tokens /
(N * capacity)); samples are spread longest-device-time first, each to the least-loaded round whose
memory still holds it (LPT), so every round gets a similar share of the work.
"""
from __future__ import annotations

from typing import Sequence


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
            raise ValueError(
                f"max_rounds={max_rounds} is too few: the batch's {sum(lengths)} tokens need at least "
                f"{first} rounds of {num_ranks} ranks x {capacity_tokens} tokens"
            )
        last = min(last, max_rounds)
    return list(range(first, max(first, last) + 1))


def spread_over_rounds(
    device_ms: Sequence[float],
    lengths: Sequence[int],
    num_rounds: int,
    round_capacity_tokens: int,
) -> list[list[int]] | None:
    """LPT spread of samples over `num_rounds` rounds by device time, within each round's memory.

    Returns the sample indices per round (ascending), or None when a sample fits in no round. Rounds
    left empty are dropped.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-device_ms[i], -lengths[i], i))
    load = [0.0] * num_rounds
    tokens = [0] * num_rounds
    members: list[list[int]] = [[] for _ in range(num_rounds)]
    for i in order:
        open_rounds = [r for r in range(num_rounds) if tokens[r] + lengths[i] <= round_capacity_tokens]
        if not open_rounds:
            return None
        r = min(open_rounds, key=lambda r: (load[r], r))
        members[r].append(i)
        load[r] += device_ms[i]
        tokens[r] += lengths[i]
    return [sorted(m) for m in members if m]
