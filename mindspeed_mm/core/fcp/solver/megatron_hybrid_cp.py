"""Megatron-LM's hybrid (dynamic) context-parallel scheduler, re-implemented as a baseline.

Every scheduling decision follows Megatron's own rules and its own workload estimate; only the
finished groups are timed on this project's cost model, as every baseline's are, so the plan's
`predicted_ms` compares with the other strategies.

Source read: NVIDIA/Megatron-LM main at d98e8a64ddf34856e74b24714e3bedb2f5a39553 (class
`BalancedCPScheduler` in megatron/core/pipeline_parallel/hybrid_cp_schedule.py, driven by
`HybridCPDataLoaderWrapper` in megatron/core/datasets/data_schedule.py; process groups from
`create_hybrid_dp_cp_groups` in megatron/core/parallel_state.py) and the branch 26.04-alpha at
0fcbc3db89c448a52c0ad6e17b882ebada1d8782 (class `DefaultDynamicCPScheduler` in
megatron/core/datasets/data_schedule.py, its helpers in data_schedule_utils.py).

The rules, per global batch:

- Degree: a sample of L tokens needs the smallest power of two d with d x capacity >= L.
- Estimate: such a sample costs each rank of its group L^2 / d; a group's load is the sum over
  its samples, a rank in no group has load 0. Vision patches do not enter the estimate.
- Order: the batch is sorted longest first once (equal lengths keep their input order); every
  round works on what the previous one left, in the order it was left.
- Buckets: at the start of a round the queue is cut, in order, into runs of about equal estimated
  work. With k distinct degrees in the queue and target = total work / k, a run is closed before a
  sample that would lift it above 1.1 x target, or when the samples left number no more than k
  minus twice the runs closed so far (Megatron counts the closed runs twice; kept as it is).
- Filling a round: repeatedly take the first sample of the first bucket that can go somewhere (a
  group of its degree exists, or that many ranks are free). With enough free ranks it opens a new
  group on the lowest free ranks; otherwise it joins the least-loaded group of its degree whose
  ranks still hold it (tokens <= d x capacity; the earliest-opened on ties); when none has room
  the round ends.
- Early exit: once a sample of smaller degree than the round's first sample has been placed, the
  round ends as soon as samples remain, no rank is free and the largest and smallest loads differ
  by at most 5 % of the largest.
- Trim: then, while no rank is free and the loads differ by more than 5 % of the largest, the
  sample added last to the most-loaded group (the earliest-opened of equals) goes back to the end
  of the queue, provided the group keeps another one and the spread of loads shrinks.
- Doubling: while ranks are free, the earliest-opened group of the smallest degree doubles
  (at most to N), the groups opened after it moving up by the ranks it takes.

Readings where this project's inputs differ from Megatron's:

- Megatron's per-rank token limit (`max_seqlen_per_dp_cp_rank`) is `cost.capacity_tokens`, its DP
  x CP world is `config.num_ranks`, its sub-sample groups (one per barrier) are the rounds, and
  `min_dynamic_context_parallel_size` keeps its default of 1. There is no pipeline, so 26.04-alpha's
  splitting of rounds to a multiple of the virtual-pipeline group size does not apply.
- Memory: main runs a group's samples one after another, so any sample may join a group of its
  degree; a group here packs its samples into one micro-batch, as 26.04-alpha does, and the join
  rule and the round end above are 26.04-alpha's. 26.04-alpha leaves the trim switched off:
  ``trim=False`` reproduces it, the default ``trim=True`` is main's trim.
- Attention: ring, Megatron's default CP communication (``--cp-comm-type p2p``).
- Placement: Megatron lays groups out in the order it opened them, which is largest first except
  when a trimmed sample, queued last, opens a group larger than one opened before it; there its
  layout would not match its aligned power-of-two process groups. Groups are placed largest first
  (stable), which is Megatron's layout wherever that one is aligned.
- N must be a power of two: Megatron builds aligned process groups of the powers of two from 2 up
  to half the largest power of two within N, and one of all N ranks, so any other N lacks sizes its
  rules produce. A sample's degree must also be a power of two within
  `config.degree_limit`; the doubling, as Megatron's, goes up to N.
- A sample longer than degree_limit x capacity raises `InfeasibleSampleError` (the input check every
  planner applies); one whose power-of-two degree exceeds the largest power of two within
  degree_limit raises `BaselineInfeasibleError` naming it.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.baseline_common import (
    RING,
    BaselineInfeasibleError,
    baseline_plan,
    own_degree_lengths,
    placed_group,
    round_of,
)
from mindspeed_mm.core.fcp.solver.plan import Plan, RoundPlan, SolverConfig

BALANCE_SLACK = 0.05
"""Loads within this share of the largest count as balanced (early exit, trim)."""
BUCKET_SLACK = 1.1
"""A bucket may exceed its work target by this factor before it is closed."""


@dataclass
class HybridGroup:
    """One group of a round as Megatron's scheduler builds it."""

    degree: int
    samples: list[int] = field(default_factory=list)
    """Sample indices in the order they joined."""
    tokens: int = 0
    """Tokens of its samples, at most degree x capacity."""
    load: float = 0.0
    """Megatron's estimate of the work on each rank of the group: sum of L^2 / degree."""


def power_of_two_degree(length: int, capacity: int) -> int:
    """Smallest power of two whose ranks hold `length` tokens at `capacity` tokens each."""
    return 1 << (-(-length // capacity) - 1).bit_length()


def _work(length: int, degree: int) -> float:
    """Megatron's per-rank workload estimate of a sample."""
    return length * length / degree


def equal_work_buckets(queue: Sequence[int], lengths: Sequence[int], degrees: Sequence[int]) -> list[deque[int]]:
    """`queue` cut in order into runs of about equal estimated work, aiming at one per distinct degree."""
    work = [_work(lengths[s], degrees[s]) for s in queue]
    k = len({degrees[s] for s in queue})
    target = sum(work) / k
    buckets: list[deque[int]] = []
    current: list[int] = []
    current_work = 0.0
    remaining_k = k
    for i, (s, w) in enumerate(zip(queue, work)):
        # remaining_k already drops by one per closed run, and the closed runs are subtracted again.
        if current and (current_work + w > target * BUCKET_SLACK or len(queue) - i <= remaining_k - len(buckets)):
            buckets.append(deque(current))
            current, current_work = [], 0.0
            remaining_k -= 1
        current.append(s)
        current_work += w
    if current:
        buckets.append(deque(current))
    return buckets


def _spread(groups: Sequence[HybridGroup], free: int) -> tuple[float, float]:
    """(largest, smallest) per-rank load of a round; a free rank has load 0."""
    loads = [g.load for g in groups]
    return max(loads), 0.0 if free else min(loads)


def _balanced(groups: Sequence[HybridGroup], free: int) -> bool:
    """Whether the round's per-rank loads lie within BALANCE_SLACK of the largest."""
    high, low = _spread(groups, free)
    return high - low <= BALANCE_SLACK * high


def _next_sample(
    buckets: Sequence[deque[int]], groups: Sequence[HybridGroup], free: int, degrees: Sequence[int]
) -> deque[int] | None:
    """The first bucket whose first sample has a group of its degree or enough free ranks."""
    open_degrees = {g.degree for g in groups}
    for bucket in buckets:
        if bucket and (degrees[bucket[0]] in open_degrees or free >= degrees[bucket[0]]):
            return bucket
    return None


def fill_round(
    queue: Sequence[int], lengths: Sequence[int], degrees: Sequence[int], capacity: int, num_ranks: int
) -> tuple[list[HybridGroup], list[int]]:
    """The groups of one round in the order opened, and the queue left for the next rounds."""
    buckets = equal_work_buckets(queue, lengths, degrees)
    groups: list[HybridGroup] = []
    free = num_ranks
    first_degree: int | None = None
    check_balance = False
    while buckets:
        bucket = _next_sample(buckets, groups, free, degrees)
        if bucket is None:
            break
        s = bucket[0]
        degree, length = degrees[s], lengths[s]
        if free >= degree:
            target = HybridGroup(degree)
            groups.append(target)
            free -= degree
        else:
            roomy = [g for g in groups if g.degree == degree and g.tokens + length <= degree * capacity]
            if not roomy:
                break
            target = min(roomy, key=lambda g: g.load)
        target.samples.append(s)
        target.tokens += length
        target.load += _work(length, degree)
        bucket.popleft()
        while buckets and not buckets[0]:
            buckets.pop(0)
        first_degree = degree if first_degree is None else first_degree
        check_balance = check_balance or degree < first_degree
        if check_balance and buckets and _balanced(groups, free):
            break
    return groups, [s for bucket in buckets for s in bucket]


def trim_round(groups: list[HybridGroup], free: int, lengths: Sequence[int]) -> list[int]:
    """Takes the last-added sample off the most-loaded group while that narrows the spread; returns
    the samples taken off, in that order."""
    taken: list[int] = []
    while not _balanced(groups, free):
        high, low = _spread(groups, free)
        if low == 0.0:
            break
        heaviest = next(g for g in groups if g.load == high)
        if len(heaviest.samples) <= 1:
            break
        last = heaviest.samples[-1]
        work = _work(lengths[last], heaviest.degree)
        loads = [g.load - work if g is heaviest else g.load for g in groups]
        if max(loads) - min(loads) >= high - low:
            break
        heaviest.samples.pop()
        heaviest.tokens -= lengths[last]
        heaviest.load -= work
        taken.append(last)
    return taken


def double_into_free_ranks(groups: list[HybridGroup], free: int, num_ranks: int) -> None:
    """Doubles the earliest-opened group of the smallest degree until no rank is free."""
    while free:
        smallest = min(g.degree for g in groups)
        grown = next(g for g in groups if g.degree == smallest)
        # N is a power of two and so is every degree, so the free ranks are a multiple of `smallest`.
        grown.degree = min(2 * smallest, num_ranks)
        free -= grown.degree - smallest


def hybrid_schedule(
    lengths: Sequence[int], capacity: int, num_ranks: int, trim: bool = True
) -> list[list[HybridGroup]]:
    """Megatron's rounds for a batch of `lengths`, each a list of groups in the order opened (every
    degree must fit in `num_ranks`, a power of two)."""
    degrees = [power_of_two_degree(length, capacity) for length in lengths]
    queue = sorted(range(len(lengths)), key=lambda s: -lengths[s])
    rounds: list[list[HybridGroup]] = []
    while queue:
        groups, queue = fill_round(queue, lengths, degrees, capacity, num_ranks)
        free = num_ranks - sum(g.degree for g in groups)
        if trim:
            queue += trim_round(groups, free, lengths)
        double_into_free_ranks(groups, free, num_ranks)
        rounds.append(groups)
    return rounds


def _checked_degrees(values: np.ndarray, capacity: int, config: SolverConfig) -> None:
    """BaselineInfeasibleError unless N and every sample's power-of-two degree fit Megatron's groups."""
    n = config.num_ranks
    if n & (n - 1):
        raise BaselineInfeasibleError(
            f"megatron_hybrid_cp: power-of-two aligned groups cannot tile {n} ranks (not a power of two)"
        )
    limit = 1 << (config.degree_limit.bit_length() - 1)
    for index, length in enumerate(values.tolist()):
        degree = power_of_two_degree(length, capacity)
        if degree > limit:
            raise BaselineInfeasibleError(
                f"megatron_hybrid_cp: sample {index} ({length} tokens) needs a power-of-two degree {degree} "
                f"above the largest allowed power of two {limit}"
            )


def megatron_hybrid_cp(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int | None = None,
    trim: bool = True,
) -> Plan:
    """Megatron-LM hybrid CP: its scheduler's rounds and groups, timed on `cost` as ring groups."""
    started = time.perf_counter()
    values = own_degree_lengths("megatron_hybrid_cp", "a degree per sample", lengths, cost, config, patches, cp_degree)
    _checked_degrees(values, cost.capacity_tokens, config)
    rounds: list[RoundPlan] = []
    for groups in hybrid_schedule(values.tolist(), cost.capacity_tokens, config.num_ranks, trim):
        placed, first = [], 0
        for g in sorted(groups, key=lambda g: -g.degree):
            placed.append(placed_group(first, g.degree, RING, g.samples, values, patches, cost, config.ranks_per_node))
            first += g.degree
        rounds.append(round_of(placed))
    extras = {"strategy": "megatron_hybrid_cp", "trim": trim}
    return baseline_plan(rounds, values, cost, config, patches, started, extras)
