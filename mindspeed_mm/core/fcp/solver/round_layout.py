"""One round: which samples run together (groups) and on how many ranks (degrees).

Candidate groupings come from stage 1 (memory best-fit-decreasing) and from a time-balanced packing
aimed at the round's lower bound; stage 2 (`degree_dp.assign_degrees`) gives each grouping its optimal
degrees. A short local search then works on the slowest group: split it, move or pull out one of its
samples, or merge the two fastest groups to free ranks for it, keeping every change that lowers the
round's makespan.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import add
from typing import Any, Iterator, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.degree_dp import assign_degrees
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer
from mindspeed_mm.core.fcp.solver.packing import best_fit_decreasing, merge_smallest, min_degree_for

# A change must shorten the round by more than this fraction to count as an improvement.
_IMPROVEMENT_RTOL = 1e-9


@dataclass(frozen=True)
class SearchLimits:
    """How hard the per-round search tries; the planner scales these with the batch size."""

    max_iterations: int
    """Improving moves accepted at most per round."""
    max_targets: int
    """Fastest groups tried as destinations when moving a sample out of the slowest group."""
    max_movers: int
    """Samples of the slowest group (smallest first) tried for moving / pulling out."""
    balanced_targets: tuple[float, ...]
    """Multiples of the round's lower bound used as time budgets for the balanced packing."""


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
    workloads: Sequence[Any]
    """Cost-model workload of each sample alone."""
    device_ms: np.ndarray
    """Estimated rank-milliseconds: minimum degree x time on it."""
    one_rank_ms: np.ndarray
    """Time on a single rank (inf when the sample needs more than one rank)."""


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
        self.max_degree = timer.max_degree
        self.limits = limits
        self._workloads: dict[tuple[int, ...], Any] = {}

    # ------------------------------------------------------------------ solving
    def solve(self, sample_ids: Sequence[int]) -> RoundChoice | None:
        """Best grouping and degrees found for these samples in one round (None: does not fit)."""
        candidates = self._initial_groupings(sample_ids)
        best: tuple[float, list[tuple[int, ...]]] | None = None
        for groups, makespan in zip(candidates, self._makespans(candidates)):
            if makespan is not None and (best is None or makespan < best[0]):
                best = (makespan, groups)
        if best is None:
            return None
        groups = self._improve(best[1], best[0])
        return self._realise(groups)

    def _initial_groupings(self, sample_ids: Sequence[int]) -> list[list[tuple[int, ...]]]:
        found: list[list[tuple[int, ...]]] = []
        packed = merge_smallest(
            best_fit_decreasing(sample_ids, self.lengths, self.capacity_tokens),
            self.num_ranks, self.max_degree, self.capacity_tokens,
        )
        if packed is not None:
            found.append([g.samples for g in packed])
        bound = float(self.facts.device_ms[list(sample_ids)].sum()) / self.num_ranks
        for factor in self.limits.balanced_targets:
            groups = self._balanced_packing(sample_ids, bound * factor)
            if groups is not None and groups not in found:
                found.append(groups)
        return found

    def _balanced_packing(self, sample_ids: Sequence[int], budget_ms: float) -> list[tuple[int, ...]] | None:
        """Samples that fill a rank's time budget alone (or need several ranks for memory) get their
        own group; the others are packed best-fit by single-rank time into one-rank groups."""
        alone: list[tuple[int, ...]] = []
        shared: list[tuple[float, int]] = []
        for i in sample_ids:
            one_rank = float(self.facts.one_rank_ms[i])
            if one_rank > budget_ms or not np.isfinite(one_rank):
                alone.append((i,))
            else:
                shared.append((one_rank, i))
        shared.sort(key=lambda item: (-item[0], item[1]))
        bins: list[list[int]] = []
        loads: list[float] = []
        tokens: list[int] = []
        for t, i in shared:
            fits = [
                b for b in range(len(bins))
                if loads[b] + t <= budget_ms and tokens[b] + self.lengths[i] <= self.capacity_tokens
            ]
            if fits:
                b = min(fits, key=lambda b: (budget_ms - loads[b] - t, b))
                bins[b].append(i)
                loads[b] += t
                tokens[b] += self.lengths[i]
            else:
                bins.append([i])
                loads.append(t)
                tokens.append(self.lengths[i])
        groups = sorted(alone + [tuple(sorted(b)) for b in bins])
        if len(groups) > self.num_ranks or self._min_degree_sum(groups) > self.num_ranks:
            return None
        return groups

    # ------------------------------------------------------------------ local search
    def _improve(self, groups: list[tuple[int, ...]], makespan: float) -> list[tuple[int, ...]]:
        for _ in range(self.limits.max_iterations):
            times = self._group_times(groups)
            candidates = list(self._neighbours(groups, int(np.argmax(times)), times))
            best: tuple[float, list[tuple[int, ...]]] | None = None
            for candidate, value in zip(candidates, self._makespans(candidates)):
                if value is not None and value < makespan * (1 - _IMPROVEMENT_RTOL):
                    if best is None or value < best[0]:
                        best = (value, candidate)
            if best is None:
                break
            makespan, groups = best
        return groups

    def _neighbours(self, groups: list[tuple[int, ...]], slow: int, times: np.ndarray):
        """Groupings one move away, all touching or helping the slowest group."""
        slowest = groups[slow]
        others = [k for k in np.argsort(times, kind="stable") if k != slow]
        movers = sorted(slowest, key=lambda i: (self.lengths[i], i))[: self.limits.max_movers]
        rest = [g for k, g in enumerate(groups) if k != slow]
        if len(slowest) > 1:
            yield sorted(rest + list(self._split_two(slowest)))
            for i in movers:
                yield sorted(rest + [(i,), tuple(s for s in slowest if s != i)])
        for k in others[: self.limits.max_targets]:
            target = groups[k]
            for i in movers if len(slowest) > 1 else ():
                moved = tuple(sorted(target + (i,)))
                kept = tuple(s for s in slowest if s != i)
                yield sorted([g for j, g in enumerate(groups) if j not in (slow, k)] + [moved, kept])
        if len(others) >= 2:
            a, b = others[0], others[1]
            merged = tuple(sorted(groups[a] + groups[b]))
            yield sorted([g for j, g in enumerate(groups) if j not in (a, b)] + [merged])

    def _split_two(self, samples: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Splits samples in two halves of similar device time (longest first, to the lighter half)."""
        halves: tuple[list[int], list[int]] = ([], [])
        loads = [0.0, 0.0]
        for i in sorted(samples, key=lambda i: (-self.facts.device_ms[i], i)):
            side = 0 if loads[0] <= loads[1] else 1
            halves[side].append(i)
            loads[side] += float(self.facts.device_ms[i])
        return tuple(sorted(halves[0])), tuple(sorted(halves[1]))

    # ------------------------------------------------------------------ evaluation
    def _workload(self, samples: tuple[int, ...]) -> Any:
        found = self._workloads.get(samples)
        if found is None:
            found = reduce(add, (self.facts.workloads[i] for i in samples))
            self._workloads[samples] = found
        return found

    def _tokens(self, samples: tuple[int, ...]) -> int:
        return sum(self.lengths[i] for i in samples)

    def _min_degree_sum(self, groups: list[tuple[int, ...]]) -> int:
        return sum(min_degree_for(self._tokens(g), self.capacity_tokens) for g in groups)

    def _shape(self, groups: list[tuple[int, ...]]) -> tuple[np.ndarray, int] | None:
        """(minimum degree per group, spare ranks), or None when the groups cannot fit."""
        if len(groups) > self.num_ranks:
            return None
        mins = np.array([min_degree_for(self._tokens(g), self.capacity_tokens) for g in groups], dtype=np.int64)
        spare = self.num_ranks - int(mins.sum())
        if spare < 0 or mins.max() > self.max_degree:
            return None
        return mins, spare

    def _extra_times(self, groups: list[tuple[int, ...]], mins: np.ndarray, spare: int) -> np.ndarray:
        """times[k, s]: group k on mins[k] + s ranks."""
        return np.stack([self.timer.window(self._workload(g), int(m), int(m) + spare) for g, m in zip(groups, mins)])

    def _makespans(self, groupings: list[list[tuple[int, ...]]]) -> list[float | None]:
        """Optimal makespan of each grouping (None: does not fit); cost queries batched."""
        shapes = [self._shape(groups) for groups in groupings]
        self.timer.prepare([
            (self._workload(g), int(m), int(m) + shape[1])
            for groups, shape in zip(groupings, shapes) if shape is not None
            for g, m in zip(groups, shape[0])
        ])
        out: list[float | None] = []
        for groups, shape in zip(groupings, shapes):
            if shape is None:
                out.append(None)
                continue
            choice = assign_degrees(self._extra_times(groups, *shape), shape[1])
            out.append(None if choice is None else choice.makespan)
        return out

    def _group_times(self, groups: list[tuple[int, ...]]) -> np.ndarray:
        mins, spare = self._shape(groups)
        times = self._extra_times(groups, mins, spare)
        choice = assign_degrees(times, spare)
        return times[np.arange(len(groups)), choice.extra]

    def _realise(self, groups: list[tuple[int, ...]]) -> RoundChoice:
        mins, spare = self._shape(groups)
        choice = assign_degrees(self._extra_times(groups, mins, spare), spare)
        chosen = []
        for k, g in enumerate(groups):
            degree = int(mins[k] + choice.extra[k])
            workload = self._workload(g)
            chosen.append(GroupChoice(g, degree, self.timer.algo(workload, degree), self.timer.time(workload, degree)))
        return RoundChoice(tuple(chosen), choice.makespan)
