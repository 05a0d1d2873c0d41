"""One round: which samples run together (groups) and on how many ranks (degrees).

Start groupings come from a time-balanced LPT packing aimed at the round's work bound, from
uniform-degree packings, and from stage 1 (memory best-fit-decreasing); stage 2
(`degree_dp.assign_degrees`) gives each grouping its optimal degrees. A short local search then
works on the slowest group: split it, pull one of its samples out, merge it with a fast group, move
one of its samples to a fast group, or merge the two fastest groups to free ranks for it, keeping
every change that lowers the round's makespan.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.degree_dp import assign_degrees, beats, optimal_makespan, realise
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer
from mindspeed_mm.core.fcp.solver.packing import best_fit_decreasing, merge_smallest, min_degree_for

# A change must shorten the round by more than this fraction to count as an improvement.
_IMPROVEMENT_RTOL = 1e-9
# Extra degree columns kept for local-search moves that free ranks (a merge frees at most one).
_MOVE_MARGIN = 2


@dataclass(frozen=True)
class SearchLimits:
    """How hard the per-round search tries; the planner scales these with the batch size."""

    max_iterations: int
    """Improving moves accepted at most per round."""
    max_targets: int
    """Fastest groups tried as destinations when moving a sample out of the slowest group."""
    max_movers: int
    """Samples of the slowest group (smallest first) tried for moving / pulling out."""
    bin_fractions: tuple[float, ...]
    """Fractions of the free ranks used as one-rank groups by the time-balanced (LPT) packing."""
    uniform_degrees: int
    """Degrees g = 2..this tried by the uniform packing (N // g groups of about g ranks each)."""
    first_improvement: bool
    """Take the first improving move instead of the best one."""


@dataclass(frozen=True)
class GroupChoice:
    """A group of a round before placement on concrete ranks."""

    samples: tuple[int, ...]
    """Sample indices, ascending."""
    degree: int
    """Ranks of the group."""
    algo: str
    """Fastest algo at that degree."""
    predicted_ms: float
    """Predicted time of the group."""


@dataclass(frozen=True)
class RoundChoice:
    """Groups and degrees of one round."""

    groups: tuple[GroupChoice, ...]
    """The round's groups; their degrees sum to the number of ranks."""
    makespan: float
    """Predicted time of the round: the slowest group."""


@dataclass(frozen=True)
class SampleFacts:
    """Per-sample figures the round search uses (all indexed by sample)."""

    lengths: Sequence[int]
    """LLM tokens."""
    patches: Sequence[int] | None
    """Vision-encoder patches (None: no vision input)."""
    workloads: Sequence[Any]
    """Cost-model workload of each sample alone."""
    device_ms: list[float]
    """Estimated rank-milliseconds: minimum degree x time on it."""
    one_rank_ms: list[float]
    """Time on a single rank (inf when the sample needs more than one rank)."""


class _Group:
    """A candidate group with its memoised times on every degree it may get."""

    __slots__ = ("samples", "min_degree", "times", "algos")

    def __init__(self, samples: tuple[int, ...], min_degree: int, times: np.ndarray, algos: np.ndarray) -> None:
        self.samples = samples
        self.min_degree = min_degree
        self.times = times  # best time on min_degree + s ranks, inf where not allowed
        self.algos = algos  # index of that best algo


class RoundSolver:
    """Solves rounds of one batch; shares the memoised group times between rounds and R choices."""

    def __init__(
        self, facts: SampleFacts, timer: GroupTimer, capacity_tokens: int, num_ranks: int, limits: SearchLimits
    ) -> None:
        self.facts = facts
        self.lengths = facts.lengths
        self.timer = timer
        self.capacity_tokens = capacity_tokens
        self.num_ranks = num_ranks
        self.top_degree = min(timer.max_degree, num_ranks)
        self.limits = limits
        self._known: dict[tuple[int, ...], _Group] = {}

    def best_ms(self, i: int) -> float:
        """Shortest time of sample i alone over every degree it may get."""
        lo = min_degree_for(self.lengths[i], self.capacity_tokens)
        return float(np.min(self.timer.window(self.facts.workloads[i], lo, self.top_degree)))

    # ------------------------------------------------------------------ solving
    def solve(self, sample_ids: Sequence[int]) -> RoundChoice | None:
        """Best grouping and degrees found for these samples in one round (None: does not fit)."""
        best: tuple[float, list[_Group]] | None = None
        for grouping in self._initial_groupings(sample_ids):
            spare = self.num_ranks - sum(min_degree_for(sum(self.lengths[i] for i in g), self.capacity_tokens)
                                         for g in grouping)
            groups = self._groups(grouping, max(1, spare + 1 + _MOVE_MARGIN))
            built = self._matrix(groups)
            if built is None:
                continue
            makespan = optimal_makespan(*built)
            if np.isfinite(makespan) and (best is None or makespan < best[0]):
                best = (makespan, groups)
        if best is None:
            return None
        return self._realise(self._improve(best[1], best[0]))

    def _initial_groupings(self, sample_ids: Sequence[int]) -> Iterator[list[tuple[int, ...]]]:
        """Start groupings, time-balanced ones first, the memory packing of stage 1 after them."""
        seen: list[list[tuple[int, ...]]] = []

        def fresh(groups: list[tuple[int, ...]] | None) -> bool:
            if groups is None or groups in seen:
                return False
            seen.append(groups)
            return True

        for fraction in self.limits.bin_fractions:
            groups = self._lpt_packing(sample_ids, fraction)
            if fresh(groups):
                yield groups
        for degree in range(2, min(self.limits.uniform_degrees, self.top_degree) + 1):
            groups = self._uniform_packing(sample_ids, degree)
            if fresh(groups):
                yield groups
        packed = merge_smallest(
            best_fit_decreasing(sample_ids, self.lengths, self.capacity_tokens),
            self.num_ranks, self.top_degree, self.capacity_tokens,
        )
        if packed is not None and fresh([g.samples for g in packed]):
            yield [g.samples for g in packed]
        singletons = [(i,) for i in sorted(sample_ids)]
        # The most groups possible: needed when a degree cap leaves fewer groups unable to occupy
        # every rank.
        if len(singletons) <= self.num_ranks and fresh(singletons):
            yield singletons

    def _lpt_packing(self, sample_ids: Sequence[int], bin_fraction: float) -> list[tuple[int, ...]] | None:
        """Time-balanced grouping aimed at the round's work bound tau = sum(device time) / N.

        A sample that needs several ranks (memory) or alone takes longer than tau on one rank gets
        its own group, and about device_time / tau ranks are set aside for it. The other samples
        are spread longest first over `bin_fraction` of the remaining ranks, each to the one-rank
        group with the least work that still has memory for it (LPT).
        """
        ids = list(sample_ids)
        device = self.facts.device_ms
        one_rank_ms = self.facts.one_rank_ms
        tau = sum(device[i] for i in ids) / self.num_ranks
        alone: list[tuple[int, ...]] = []
        shared: list[int] = []
        reserved = 0
        for i in ids:
            one_rank = one_rank_ms[i]
            if one_rank > tau or not math.isfinite(one_rank):
                alone.append((i,))
                need = min_degree_for(self.lengths[i], self.capacity_tokens)
                reserved += max(need, math.ceil(device[i] / tau)) if tau > 0 else need
            else:
                shared.append(i)
        bins = min(len(shared), max(1, int((self.num_ranks - reserved) * bin_fraction)))
        groups = sorted(alone)
        if shared:
            members: list[list[int]] = [[] for _ in range(bins)]
            tokens = [0] * bins
            heap = [(0.0, b) for b in range(bins)]
            shared.sort(key=lambda i: (-one_rank_ms[i], i))
            for i in shared:
                skipped = []
                while heap and tokens[heap[0][1]] + self.lengths[i] > self.capacity_tokens:
                    skipped.append(heapq.heappop(heap))
                load, b = heapq.heappop(heap) if heap else skipped.pop(0)
                members[b].append(i)
                tokens[b] += self.lengths[i]
                heapq.heappush(heap, (load + one_rank_ms[i], b))
                for entry in skipped:
                    heapq.heappush(heap, entry)
            groups = sorted(groups + [tuple(sorted(m)) for m in members if m])
        if len(groups) > self.num_ranks or self._min_degree_sum(groups) > self.num_ranks:
            return None
        return groups

    def _uniform_packing(self, sample_ids: Sequence[int], degree: int) -> list[tuple[int, ...]] | None:
        """N // degree groups of `degree` ranks (the leftover ranks widen the first ones); samples
        go longest first to the group with the least work per rank that has memory for them."""
        count = self.num_ranks // degree
        widths = [degree + (1 if k < self.num_ranks - count * degree else 0) for k in range(count)]
        device = self.facts.device_ms
        members: list[list[int]] = [[] for _ in range(count)]
        room = [w * self.capacity_tokens for w in widths]
        heap = [(0.0, k) for k in range(count)]
        for i in sorted(sample_ids, key=lambda i: (-device[i], i)):
            skipped = []
            while heap and room[heap[0][1]] < self.lengths[i]:
                skipped.append(heapq.heappop(heap))
            if not heap:
                return None
            load, k = heapq.heappop(heap)
            members[k].append(i)
            room[k] -= self.lengths[i]
            heapq.heappush(heap, (load + device[i] / widths[k], k))
            for entry in skipped:
                heapq.heappush(heap, entry)
        return sorted(tuple(sorted(m)) for m in members if m)

    # ------------------------------------------------------------------ local search
    def _improve(self, groups: list[_Group], makespan: float) -> list[_Group]:
        for _ in range(self.limits.max_iterations):
            base, spare = self._matrix(groups, margin=_MOVE_MARGIN)
            extra = realise(base, spare, makespan)
            times = base[np.arange(len(groups)), extra]
            moves = list(self._neighbours(groups, int(np.argmax(times)), times))
            self._groups([g for _, added in moves for g in added], spare + 1 + _MOVE_MARGIN)
            target = makespan * (1 - _IMPROVEMENT_RTOL)
            best: tuple[float, list[_Group]] | None = None
            for removed, added in moves:
                built = self._moved_matrix(groups, base, spare, removed, self._groups(added))
                # One feasibility check rejects most candidates before the exact makespan is computed.
                if built is None or not beats(built[0], built[1], target):
                    continue
                value = optimal_makespan(*built)
                if best is None or value < best[0]:
                    best = (value, [g for k, g in enumerate(groups) if k not in removed] + self._groups(added))
                if self.limits.first_improvement:
                    break
            if best is None:
                break
            makespan, groups = best
        return groups

    def _moved_matrix(self, groups: list[_Group], base: np.ndarray, spare: int, removed: set[int],
                      added: list[_Group]) -> tuple[np.ndarray, int] | None:
        """The time matrix after a move, from the current one (`base`, `spare`) without rebuilding it."""
        count = len(groups) - len(removed) + len(added)
        new_spare = spare + sum(groups[k].min_degree for k in removed) - sum(g.min_degree for g in added)
        if count > self.num_ranks or new_spare < 0 or any(g.min_degree > self.top_degree for g in added):
            return None
        if new_spare + 1 > base.shape[1]:
            return self._matrix([g for k, g in enumerate(groups) if k not in removed] + added)
        keep = np.ones(len(groups), dtype=bool)
        keep[list(removed)] = False
        width = new_spare + 1
        rows = np.full((len(added), width), np.inf)
        self._widen(added, width)
        for k, g in enumerate(added):
            row = g.times[:width]
            rows[k, : len(row)] = row
        return np.concatenate([base[keep, :width], rows]), new_spare

    def _neighbours(
        self, groups: list[_Group], slow: int, times: np.ndarray
    ) -> Iterator[tuple[set[int], list[tuple[int, ...]]]]:
        """Moves as (indices of groups removed, sample tuples of groups added), all touching or
        helping the slowest group: split it in two, pull one of its samples out, merge it with a
        fast group, move one of its samples to a fast group, or merge the two fastest groups."""
        slowest = groups[slow].samples
        others = [int(k) for k in np.argsort(times, kind="stable") if k != slow]
        movers = sorted(slowest, key=lambda i: (self.lengths[i], i))[: self.limits.max_movers]
        if len(slowest) > 1:
            yield {slow}, list(self._split_two(slowest))
            for i in movers:
                yield {slow}, [(i,), tuple(s for s in slowest if s != i)]
        for k in others[: self.limits.max_targets]:
            target = groups[k].samples
            yield {slow, k}, [tuple(sorted(slowest + target))]
            for i in movers if len(slowest) > 1 else ():
                yield {slow, k}, [tuple(sorted(target + (i,))), tuple(s for s in slowest if s != i)]
        if len(others) >= 2:
            yield {others[0], others[1]}, [tuple(sorted(groups[others[0]].samples + groups[others[1]].samples))]

    def _split_two(self, samples: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Splits samples in two halves of similar device time (longest first, to the lighter half)."""
        halves: tuple[list[int], list[int]] = ([], [])
        loads = [0.0, 0.0]
        for i in sorted(samples, key=lambda i: (-self.facts.device_ms[i], i)):
            side = 0 if loads[0] <= loads[1] else 1
            halves[side].append(i)
            loads[side] += self.facts.device_ms[i]
        return tuple(sorted(halves[0])), tuple(sorted(halves[1]))

    # ------------------------------------------------------------------ evaluation
    def _groups(self, grouping: Sequence[tuple[int, ...]], width: int = 1) -> list[_Group]:
        """The groups of `grouping`; new ones are evaluated together on their first `width` degrees
        (more are added on demand by `_matrix`)."""
        new = [g for g in dict.fromkeys(grouping) if g not in self._known]
        if new:
            mins = [min_degree_for(sum(self.lengths[i] for i in g), self.capacity_tokens) for g in new]
            times, algos = self.timer.evaluate([self._workload(g) for g in new], mins, self.top_degree, width)
            for k, (g, m) in enumerate(zip(new, mins)):
                self._known[g] = _Group(g, m, times[k], algos[k])
        return [self._known[g] for g in grouping]

    def _workload(self, samples: tuple[int, ...]) -> Any:
        patches = self.facts.patches
        return self.timer.cost.workload([self.lengths[i] for i in samples],
                                        None if patches is None else [patches[i] for i in samples])

    def _widen(self, groups: list[_Group], width: int) -> None:
        """Evaluates more degrees for groups known on fewer than `width` (up to the top degree)."""
        short = [g for g in groups if len(g.times) < min(width, self.top_degree - g.min_degree + 1)]
        if short:
            # Some slack, so that neighbouring moves with a little more spare reuse the rows.
            times, algos = self.timer.evaluate([self._workload(g.samples) for g in short],
                                               [g.min_degree for g in short], self.top_degree, width + 8)
            for k, g in enumerate(short):
                g.times, g.algos = times[k], algos[k]

    def _matrix(self, groups: list[_Group], margin: int = 0) -> tuple[np.ndarray, int] | None:
        """(times[k, s] of group k on min_degree + s ranks, spare ranks), None when the groups cannot
        fit; `margin` more columns are kept for moves that free ranks."""
        if len(groups) > self.num_ranks:
            return None
        spare = self.num_ranks - sum(g.min_degree for g in groups)
        if spare < 0 or max(g.min_degree for g in groups) > self.top_degree:
            return None
        width = spare + 1 + margin
        self._widen(groups, width)
        times = np.full((len(groups), width), np.inf)
        for k, g in enumerate(groups):
            row = g.times[:width]
            times[k, : len(row)] = row
        return times, spare

    def _min_degree_sum(self, grouping: list[tuple[int, ...]]) -> int:
        return sum(min_degree_for(sum(self.lengths[i] for i in g), self.capacity_tokens) for g in grouping)

    def _realise(self, groups: list[_Group]) -> RoundChoice:
        times, spare = self._matrix(groups)
        choice = assign_degrees(times, spare)
        chosen = [
            GroupChoice(g.samples, g.min_degree + int(extra), self.timer.cost.algos[int(g.algos[extra])],
                        float(g.times[extra]))
            for g, extra in zip(groups, choice.extra)
        ]
        return RoundChoice(tuple(sorted(chosen, key=lambda c: c.samples)), choice.makespan)
