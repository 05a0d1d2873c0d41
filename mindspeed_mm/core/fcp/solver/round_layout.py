"""One round: which samples run together (groups) and on how many ranks (degrees).

Start groupings come from uniform packings (groups of about g ranks, samples balanced by their
marginal time per rank), from a time-balanced LPT packing aimed at the round's work bound, and from
stage 1 (memory best-fit-decreasing); stage 2 (`degree_dp`) gives each grouping its optimal degrees
(`RoundSolver.evaluated`, straight from the batched workloads of the groups) and the best one is the
round's start. A local search then works on the slowest group: split it, pull one of its samples
out, merge it with a fast group, move one of its samples to a fast group, or merge the two fastest
groups to free ranks for it, keeping every change that lowers the round's makespan. (Large batches
take their starts from `step_layout` and end with `round_polish` instead.)

This module holds `RoundSolver` (memoised group times, degree splits); the start groupings are in
`round_starts`, the local search in `round_search`, the values they exchange in `round_types`.

Degree windows: group k is timed on degrees m_k .. m_k + W - 1 only, W about twice the round's
average group size (enough for any balanced layout); while a group that sets the makespan might
still run faster beyond its window (its best time is on the window's last degree, or the algo it runs
there still gets faster: `at_window_edge`), the windows are doubled and the split redone.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.degree_dp import optimal_makespan, realise
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer
from mindspeed_mm.core.fcp.solver.packing import min_degree_for
from mindspeed_mm.core.fcp.solver.round_search import improve
from mindspeed_mm.core.fcp.solver.round_starts import start_assignments, uniform_packing
from mindspeed_mm.core.fcp.solver.round_types import (
    CandidateGroup, GroupChoice, RoundChoice, RoundStart, SampleFacts, SearchLimits, at_window_edge,
)

__all__ = ["GroupChoice", "RoundChoice", "RoundSolver", "RoundStart", "SampleFacts", "SearchLimits"]

# Degree window: twice the round's average group size plus this many degrees.
_WINDOW_SLACK = 8


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
        self._known: dict[tuple[int, ...], CandidateGroup] = {}
        self._twin: GroupTimer | None = None
        self.length_array = np.asarray(facts.lengths, dtype=np.int64)
        """The samples' LLM tokens as an array."""
        self.min_degrees = np.asarray(facts.min_degrees, dtype=np.int64)
        self.device_ms = np.asarray(facts.device_ms, dtype=np.float64)
        self._marginal: dict[int, tuple[list[float], np.ndarray]] = {}
        self._whole: tuple[np.ndarray, np.ndarray] | None = None
        ids = np.arange(len(facts.lengths), dtype=np.int64)
        self.all_by_work = ids[np.lexsort((ids, -self.device_ms))]
        """Every sample, most device time first (ties: lowest index)."""

    def best_ms(self, i: int) -> float:
        """Shortest time of sample i alone over every degree it may get."""
        return float(np.min(self.timer.window(self.facts.workloads[i], self.facts.min_degrees[i], self.top_degree)))

    # ------------------------------------------------------------------ solving
    def solve(self, sample_ids: Sequence[int]) -> RoundChoice | None:
        """Best grouping and degrees found for these samples in one round (None: does not fit)."""
        start = self.start(sample_ids)
        return None if start is None else self.finish(start)

    def start(self, sample_ids: Sequence[int], degrees: Sequence[int] | None = None) -> RoundStart | None:
        """The best start grouping (see `starts`), None when nothing fits."""
        found = self.starts(sample_ids, degrees)
        return found[0] if found else None

    def starts(self, sample_ids: Sequence[int], degrees: Sequence[int] | None = None) -> list[RoundStart]:
        """The start groupings that fit, best optimal makespan first (ties: generation order):
        uniform ones of these group sizes (default the limits'), plus the other start groupings when
        the limits ask for them or when no uniform one fits."""
        degrees = self.limits.uniform_degrees if degrees is None else degrees
        candidates = list(start_assignments(self, sample_ids, degrees, self.limits.packing_starts))
        found = [start for start in self.evaluated_together(candidates) if start is not None]
        if not found and not self.limits.packing_starts:
            candidates = list(start_assignments(self, sample_ids, (), True))
            found = [start for start in self.evaluated_together(candidates) if start is not None]
        return sorted(found, key=lambda start: start.makespan)

    def uniform_start(self, sample_ids: Sequence[int], degree: int) -> RoundStart | None:
        """The uniform start grouping of one round for group size `degree` (None: it does not fit)."""
        packed = uniform_packing(self, self.by_work(sample_ids), degree)
        return None if packed is None else self.evaluated(*packed)

    @property
    def cost_calls(self) -> int:
        """Cost-model queries so far, of the shared timer and of the memory-free one."""
        return self.timer.cost_calls + (0 if self._twin is None else self._twin.cost_calls)

    def memory_free_timer(self) -> GroupTimer:
        """Times on the cost model without its memory limit."""
        if self._twin is None:
            self._twin = GroupTimer(self.timer.cost.without_memory_limit(), self.top_degree)
        return self._twin

    def whole_batch_ms(self) -> tuple[np.ndarray, np.ndarray]:
        """(T(whole batch, d), T(empty batch, d)) for d = 1 .. top degree, memory ignored (memoised)."""
        if self._whole is None:
            self._batch_times([])
        assert self._whole is not None
        return self._whole

    def alone_best_ms(self, samples: Sequence[int]) -> np.ndarray:
        """Per sample of `samples`: its shortest time alone over its minimum degree .. the top degree
        (memory ignored: the sample fits on those degrees anyway). Asked before `whole_batch_ms`, it
        shares that query."""
        return self._batch_times(samples).min(axis=1)

    def _batch_times(self, alone: Sequence[int]) -> np.ndarray:
        """One memory-free query of the samples of `alone` each on its minimum degree .. top degree
        (the rows returned, inf beyond the top degree), with the whole and the empty batch on degrees
        1 .. top when `whole_batch_ms` is not memoised yet."""
        ids = np.asarray(alone, dtype=np.int64)
        batches = 0 if self._whole is not None else 2
        left_out = np.zeros((batches, len(self.lengths)), dtype=bool)
        left_out[1:] = True
        workloads = self.facts.workloads.outside(left_out, alone=ids)
        firsts = np.concatenate([np.ones(batches, dtype=np.int64), self.min_degrees[ids]])
        times, _ = self.memory_free_timer().evaluate(workloads, firsts, self.top_degree, self.top_degree)
        if batches:
            self._whole = (times[0], times[1])
        return times[batches:]

    def marginal_ms(self, degree: int) -> list[float]:
        """Per sample: the time it adds to a group of `degree` ranks, T({i}, g) - T({}, g) (memory
        ignored), memoised per degree."""
        return self._marginals(degree)[0]

    def marginal_array(self, degree: int) -> np.ndarray:
        """`marginal_ms` as an array."""
        return self._marginals(degree)[1]

    def _marginals(self, degree: int) -> tuple[list[float], np.ndarray]:
        found = self._marginal.get(degree)
        if found is None:
            count = len(self.facts.workloads)
            # One group per sample plus an empty one.
            batches = self.facts.workloads.singles_and_empty()
            times, _ = self.memory_free_timer().evaluate(batches, np.full(count + 1, degree), degree, 1)
            values = times[:count, 0] - times[count, 0]
            found = (values.tolist(), values)
            self._marginal[degree] = found
        return found

    def finish(self, start: RoundStart) -> RoundChoice:
        """The start improved by the local search, with its degrees and algos."""
        groups = []
        for k, samples in enumerate(start.grouping()):
            group = self._known.get(samples)
            if group is None:
                group = CandidateGroup(samples, int(start.min_degrees[k]), start.times[k], start.algos[k])
                self._known[samples] = group
            groups.append(group)
        improved = improve(self, groups, start.makespan, start.window)
        if improved is not groups:
            return self._realise(improved, start.window)
        spare = self.num_ranks - int(start.min_degrees.sum())
        return self._chosen(groups, start.times, realise(start.times, spare, start.makespan))

    def evaluated(self, members: np.ndarray, owners: np.ndarray, count: int,
                  window: int | None = None) -> RoundStart | None:
        """The grouping given by (members, owners) with its optimal degree split, None when it cannot
        fit. Times come straight from the batched workloads of the groups (no per-group objects); the
        degree window starts at `window` (default `_initial_window`)."""
        if count > self.num_ranks:
            return None
        workloads, tokens = self.facts.workloads.assigned(members, owners, count)
        mins = np.maximum(1, -(-tokens // self.capacity_tokens))
        spare = self._spare_ranks(count, mins)
        if spare is None:
            return None
        window = self._initial_window(count) if window is None else window
        while True:
            width = min(spare + 1, window)
            times, algos = self.timer.evaluate(workloads, mins, self.top_degree, width)
            makespan = optimal_makespan(times, spare)
            if not math.isfinite(makespan):
                return None
            if width > spare or not at_window_edge(times, algos, makespan, mins, self.top_degree):
                return RoundStart(members, owners, makespan, window, mins, times, algos)
            window *= 2

    def evaluated_together(self, groupings: Sequence[tuple[np.ndarray, np.ndarray, int]]) -> list[RoundStart | None]:
        """`evaluated` of each (members, owners, count) grouping, the groups of all of them timed in
        one cost-model query (the per-query overhead dominates at these sizes); a grouping whose split
        reaches its window's edge goes on alone with the doubled window, as in `evaluated`."""
        if len(groupings) <= 1:
            return [self.evaluated(*grouping) for grouping in groupings]
        counts = [count for _, _, count in groupings]
        offsets = np.cumsum([0, *counts])
        members = np.concatenate([m for m, _, _ in groupings])
        owners = np.concatenate([o + offsets[k] for k, (_, o, _) in enumerate(groupings)])
        workloads, tokens = self.facts.workloads.assigned(members, owners, int(offsets[-1]))
        mins = np.maximum(1, -(-tokens // self.capacity_tokens))
        shapes: list[tuple[int, int, int] | None] = []   # (spare ranks, window, width) of groupings that fit
        for k, count in enumerate(counts):
            spare = self._spare_ranks(count, mins[offsets[k]:offsets[k + 1]])
            window = self._initial_window(count)
            shapes.append(None if spare is None else (spare, window, min(spare + 1, window)))
        widths = [shape[2] for shape in shapes if shape is not None]
        if not widths:
            return [None] * len(groupings)
        # Every (group, degree) time is computed on its own, so the wider query holds the same values.
        times, algos = self.timer.evaluate(workloads, mins, self.top_degree, max(widths))
        out: list[RoundStart | None] = []
        for k, shape in enumerate(shapes):
            if shape is None:
                out.append(None)
                continue
            spare, window, width = shape
            rows = slice(offsets[k], offsets[k + 1])
            own_times = times[rows, :width]
            makespan = optimal_makespan(own_times, spare)
            if not math.isfinite(makespan):
                out.append(None)
            elif width > spare or not at_window_edge(own_times, algos[rows, :width], makespan, mins[rows],
                                                     self.top_degree):
                own_members, own_owners, _ = groupings[k]
                out.append(RoundStart(own_members, own_owners, makespan, window, mins[rows], own_times,
                                      algos[rows, :width]))
            else:
                out.append(self.evaluated(*groupings[k], window=2 * window))
        return out

    def _spare_ranks(self, count: int, mins: np.ndarray) -> int | None:
        """Ranks a grouping of `count` groups of these minimum degrees leaves beyond them, None when it
        cannot fit (more groups than ranks, too few ranks, or a group above the top degree)."""
        spare = self.num_ranks - int(mins.sum())
        if count > self.num_ranks or spare < 0 or int(mins.max()) > self.top_degree:
            return None
        return spare

    def by_work(self, sample_ids: Sequence[int]) -> np.ndarray:
        """The samples, most device time first (ties: lowest index)."""
        ids = np.asarray(sample_ids, dtype=np.int64)
        return ids[np.lexsort((ids, -self.device_ms[ids]))]

    # ------------------------------------------------------------------ evaluation
    def _initial_window(self, groups: int) -> int:
        """Degree window of a grouping of this many groups: twice the average group size + slack."""
        return 2 * -(-self.num_ranks // max(1, groups)) + _WINDOW_SLACK

    def known_groups(self, grouping: Sequence[tuple[int, ...]], width: int = 1) -> list[CandidateGroup]:
        """The groups of `grouping`; new ones are evaluated together on their first `width` degrees
        (more are added on demand by `_matrix`)."""
        new = [g for g in dict.fromkeys(grouping) if g not in self._known]
        if new:
            workloads, tokens = self.facts.workloads.groups(new)
            mins = [min_degree_for(t, self.capacity_tokens) for t in tokens.tolist()]
            times, algos = self.timer.evaluate(workloads, mins, self.top_degree, width)
            for k, (g, m) in enumerate(zip(new, mins)):
                self._known[g] = CandidateGroup(g, m, times[k], algos[k])
        return [self._known[g] for g in grouping]

    def _widen(self, groups: list[CandidateGroup], width: int) -> None:
        """Evaluates more degrees for groups known on fewer than `width` (up to the top degree)."""
        short = [g for g in groups if len(g.times) < min(width, self.top_degree - g.min_degree + 1)]
        if short:
            # Some slack, so that neighbouring moves with a little more spare reuse the rows.
            workloads, _ = self.facts.workloads.groups([g.samples for g in short])
            times, algos = self.timer.evaluate(workloads, [g.min_degree for g in short], self.top_degree, width + 8)
            for k, g in enumerate(short):
                g.times, g.algos = times[k], algos[k]

    def time_rows(self, groups: list[CandidateGroup], width: int) -> np.ndarray:
        """times[k, s] of group k on min_degree + s ranks, s < width (inf beyond what is known)."""
        self._widen(groups, width)
        rows = [g.times[:width] for g in groups]
        if all(len(row) == width for row in rows):
            return np.array(rows).reshape(len(rows), width)
        times = np.full((len(groups), width), np.inf)
        for k, row in enumerate(rows):
            times[k, : len(row)] = row
        return times

    def _algo_rows(self, groups: list[CandidateGroup], width: int) -> np.ndarray:
        """algos[k, s]: the algo index of `time_rows`' times[k, s] (-1 beyond what is known)."""
        algos = np.full((len(groups), width), -1, dtype=np.int64)
        for k, g in enumerate(groups):
            known = g.algos[:width]
            algos[k, : len(known)] = known
        return algos

    def time_matrix(self, groups: list[CandidateGroup], window: int, margin: int = 0) -> tuple[np.ndarray, int] | None:
        """(times[k, s] of group k on min_degree + s ranks, spare ranks), None when the groups cannot
        fit; at most `window` degrees per group, and `margin` more columns for moves that free ranks."""
        if len(groups) > self.num_ranks:
            return None
        spare = self.num_ranks - sum(g.min_degree for g in groups)
        if spare < 0 or max(g.min_degree for g in groups) > self.top_degree:
            return None
        return self.time_rows(groups, min(spare + 1, window) + margin), spare

    def _split(self, groups: list[CandidateGroup], window: int) -> tuple[float, int, np.ndarray, int] | None:
        """(optimal makespan, window used, time matrix, spare ranks), the window doubled while a group
        that sets the makespan could still shorten beyond it; None when the groups cannot fit."""
        while True:
            built = self.time_matrix(groups, window)
            if built is None:
                return None
            times, spare = built
            makespan = optimal_makespan(times, spare)
            if not math.isfinite(makespan) or times.shape[1] > spare or not at_window_edge(
                    times, self._algo_rows(groups, times.shape[1]), makespan,
                    np.array([g.min_degree for g in groups]), self.top_degree):
                return makespan, window, times, spare
            window *= 2

    def min_degree_sum(self, grouping: list[tuple[int, ...]]) -> int:
        """Fewest ranks whose memory holds every group of the grouping."""
        return sum(min_degree_for(sum(self.lengths[i] for i in g), self.capacity_tokens) for g in grouping)

    def _realise(self, groups: list[CandidateGroup], window: int) -> RoundChoice:
        split = self._split(groups, window)
        if split is None or not math.isfinite(split[0]):
            raise AssertionError("a round that fitted before the local search no longer fits")
        makespan, _, times, spare = split
        return self._chosen(groups, times, realise(times, spare, makespan))

    def _chosen(self, groups: list[CandidateGroup], times: np.ndarray, extra: np.ndarray) -> RoundChoice:
        """The round with group k on min_degree + extra[k] ranks (times[k, s] as in `_matrix`)."""
        chosen = [
            GroupChoice(g.samples, g.min_degree + int(s), self.timer.cost.algos[int(g.algos[s])], float(times[k, s]))
            for k, (g, s) in enumerate(zip(groups, extra.tolist()))
        ]
        return RoundChoice(tuple(sorted(chosen, key=lambda c: c.samples)), max(c.predicted_ms for c in chosen))
