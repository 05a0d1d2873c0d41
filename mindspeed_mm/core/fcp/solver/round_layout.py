"""One round: which samples run together (groups) and on how many ranks (degrees).

Start groupings come from uniform packings (groups of about g ranks, samples balanced by their
marginal time per rank), from a time-balanced LPT packing aimed at the round's work bound, and from
stage 1 (memory best-fit-decreasing); stage 2 (`degree_dp`) gives each grouping its optimal degrees
(`RoundSolver.evaluated`, straight from the batched workloads of the groups) and the best one is the
round's start. A local search then works on the slowest group: split it, pull one of its samples
out, merge it with a fast group, move one of its samples to a fast group, or merge the two fastest
groups to free ranks for it, keeping every change that lowers the round's makespan. (Large batches
take their starts from `step_layout` and end with `round_polish` instead.)

Degree windows: group k is timed on degrees m_k .. m_k + W - 1 only, W about twice the round's
average group size (enough for any balanced layout); when the optimal split leaves a group that sets
the makespan on the last degree of its window, the windows are doubled and the split redone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.balance import least_loaded_assignment
from mindspeed_mm.core.fcp.solver.degree_dp import beats, optimal_makespan, realise
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer, SampleWorkloads
from mindspeed_mm.core.fcp.solver.packing import best_fit_decreasing, merge_smallest, min_degree_for

# A change must shorten the round by more than this fraction to count as an improvement.
_IMPROVEMENT_RTOL = 1e-9
# Extra degree columns kept for local-search moves that free ranks (a merge frees at most one).
_MOVE_MARGIN = 2
# Degree window: twice the round's average group size plus this many degrees.
_WINDOW_SLACK = 8


@dataclass(frozen=True)
class SearchLimits:
    """How hard the per-round search tries; the planner scales these with the batch size."""

    uniform_degrees: tuple[int, ...]
    """Group sizes g of the uniform start groupings."""
    bin_fractions: tuple[float, ...]
    """Fractions of the free ranks used as one-rank groups by the time-balanced (LPT) start grouping."""
    packing_starts: bool
    """Also start from the stage 1 memory packing and from one group per sample."""
    max_moves: int
    """Improving moves accepted at most per round (local search or polish)."""
    max_evaluations: int
    """Candidate moves the local search evaluates at most per round (a work budget counted in moves,
    not seconds)."""
    max_targets: int
    """Fastest groups tried as destinations when moving a sample out of the slowest group."""
    max_movers: int
    """Samples of the slowest group (smallest first) tried for moving / pulling out (polish: also
    the samples of a target tried for swapping)."""
    first_improvement: bool
    """Local search: take the first improving move instead of the best one."""
    polish_min_gain: float = 0.0
    """Polish: it stops once the k slowest groups are within this fraction of the round of the
    k + 1-th slowest, k the steps left (each step relieves one slowest group, so about that much is
    left to gain)."""


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
    workloads: SampleWorkloads
    """Cost-model workloads of samples and of groups of samples."""
    min_degrees: Sequence[int]
    """Fewest ranks whose memory holds the sample."""
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


@dataclass(frozen=True)
class RoundStart:
    """A start grouping of a round, evaluated with its optimal degree split."""

    members: np.ndarray
    """The round's samples."""
    owners: np.ndarray
    """owners[j]: the group (0, 1, ...; none empty) of sample members[j]."""
    makespan: float
    """Optimal makespan of the groups."""
    window: int
    """Degree window the split was made with."""
    min_degrees: np.ndarray
    """Minimum degree of each group (memory)."""
    times: np.ndarray
    """times[k, s]: best time of group k on min_degrees[k] + s ranks."""
    algos: np.ndarray
    """Index of that best algo."""

    def grouping(self) -> list[tuple[int, ...]]:
        """The groups as ascending sample tuples, group 0 first."""
        return _owned_tuples(self.members, self.owners)


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
        found = [start for candidate in self._start_assignments(sample_ids, degrees, self.limits.packing_starts)
                 if (start := self.evaluated(*candidate)) is not None]
        if not found and not self.limits.packing_starts:
            found = [start for candidate in self._start_assignments(sample_ids, (), True)
                     if (start := self.evaluated(*candidate)) is not None]
        return sorted(found, key=lambda start: start.makespan)

    def uniform_start(self, sample_ids: Sequence[int], degree: int) -> RoundStart | None:
        """The uniform start grouping of one round for group size `degree` (None: it does not fit)."""
        packed = self._uniform_packing(self.by_work(sample_ids), degree)
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
                group = _Group(samples, int(start.min_degrees[k]), start.times[k], start.algos[k])
                self._known[samples] = group
            groups.append(group)
        improved = self._improve(groups, start.makespan, start.window)
        if improved is not groups:
            return self._realise(improved, start.window)
        spare = self.num_ranks - int(start.min_degrees.sum())
        return self._chosen(groups, start.times, realise(start.times, spare, start.makespan))

    def evaluated(self, members: np.ndarray, owners: np.ndarray, count: int) -> RoundStart | None:
        """The grouping given by (members, owners) with its optimal degree split, None when it cannot
        fit. Times come straight from the batched workloads of the groups (no per-group objects)."""
        if count > self.num_ranks:
            return None
        workloads, tokens = self.facts.workloads.assigned(members, owners, count)
        mins = np.maximum(1, -(-tokens // self.capacity_tokens))
        spare = self.num_ranks - int(mins.sum())
        if spare < 0 or int(mins.max()) > self.top_degree:
            return None
        window = self._initial_window(count)
        while True:
            width = min(spare + 1, window)
            times, algos = self.timer.evaluate(workloads, mins, self.top_degree, width)
            makespan = optimal_makespan(times, spare)
            if not math.isfinite(makespan):
                return None
            if width > spare or not _at_window_edge(times, makespan):
                return RoundStart(members, owners, makespan, window, mins, times, algos)
            window *= 2

    def _start_assignments(
        self, sample_ids: Sequence[int], degrees: Sequence[int], packings: bool
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

        for fraction in self.limits.bin_fractions if packings else ():
            groups = self._lpt_packing(sample_ids, fraction)
            if groups is not None and fresh(groups):
                yield _assignment(groups)
        by_work = self.by_work(sample_ids)
        for degree in degrees:
            if degree <= self.top_degree:
                packed = self._uniform_packing(by_work, degree)
                if packed is not None and (not packings or fresh(_grouping(packed[0], packed[1]))):
                    yield packed
        if not packings:
            return
        if not self.limits.bin_fractions:
            groups = self._lpt_packing(sample_ids, 1.0)
            if groups is not None and fresh(groups):
                yield _assignment(groups)
        stage_one = merge_smallest(
            best_fit_decreasing(sample_ids, self.lengths, self.capacity_tokens),
            self.num_ranks, self.top_degree, self.capacity_tokens,
        )
        if stage_one is not None and fresh([g.samples for g in stage_one]):
            yield _assignment([g.samples for g in stage_one])
        singletons = [(i,) for i in sorted(sample_ids)]
        # The most groups possible: needed when a degree cap leaves fewer groups unable to occupy
        # every rank.
        if len(singletons) <= self.num_ranks and fresh(singletons):
            yield _assignment(singletons)

    def _lpt_packing(self, sample_ids: Sequence[int], bin_fraction: float) -> list[tuple[int, ...]] | None:
        """Time-balanced grouping aimed at the round's work bound tau = sum(device time) / N.

        A sample that needs several ranks (memory) or alone takes longer than tau on one rank gets
        its own group, and about device_time / tau ranks are set aside for it. The other samples
        are spread longest first over `bin_fraction` of the remaining ranks, each to the one-rank
        group with the least work that still has memory for it (else the one with the least work).
        """
        device = self.facts.device_ms
        one_rank_ms = self.facts.one_rank_ms
        tau = sum(device[i] for i in sample_ids) / self.num_ranks
        alone: list[tuple[int, ...]] = []
        shared: list[int] = []
        reserved = 0
        for i in sample_ids:
            one_rank = one_rank_ms[i]
            if one_rank > tau or not math.isfinite(one_rank):
                alone.append((i,))
                need = self.facts.min_degrees[i]
                reserved += max(need, math.ceil(device[i] / tau)) if tau > 0 else need
            else:
                shared.append(i)
        bins = min(len(shared), max(1, int((self.num_ranks - reserved) * bin_fraction)))
        groups = sorted(alone)
        if shared:
            shared.sort(key=lambda i: (-one_rank_ms[i], i))
            chosen = least_loaded_assignment(shared, one_rank_ms, self.lengths, [self.capacity_tokens] * bins,
                                             overflow=True)
            if chosen is None:
                raise AssertionError("an assignment with overflow always places every item")
            groups = sorted(groups + _grouping(np.array(shared), np.array(chosen)))
        if len(groups) > self.num_ranks or self._min_degree_sum(groups) > self.num_ranks:
            return None
        return groups

    def by_work(self, sample_ids: Sequence[int]) -> np.ndarray:
        """The samples, most device time first (ties: lowest index)."""
        ids = np.asarray(sample_ids, dtype=np.int64)
        return ids[np.lexsort((ids, -self.device_ms[ids]))]

    def _uniform_packing(self, by_work: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """Groups of about `degree` ranks. A sample that needs more ranks (memory) opens a group of
        its own minimum degree; the other ranks form N' // degree groups (more, narrower ones when
        the degree cap requires it; leftover ranks widen the first ones). The other samples go, most
        device time first (`by_work` order), to the group with the least time per rank that has
        memory for them, a sample adding its marginal time at `degree` ranks. Returns (members,
        owners, group count) as for `_evaluated`."""
        wide = self.min_degrees[by_work] > degree
        own = np.sort(by_work[wide]).tolist()
        rest = by_work[~wide].tolist()
        free = self.num_ranks - int(self.min_degrees[own].sum())
        if free < 0 or (rest and free == 0):
            return None
        count = min(max(1, free // degree), len(rest)) if rest else 0
        if count and -(-free // count) > self.top_degree:
            count = min(-(-free // self.top_degree), len(rest))
        mins = self.facts.min_degrees
        widths = [mins[i] for i in own] + [free // count + (1 if k < free % count else 0) for k in range(count)]
        rooms = [w * self.capacity_tokens for w in widths]
        loads = [0.0] * len(widths)
        for k, i in enumerate(own):
            rooms[k] -= self.lengths[i]
            loads[k] = self.facts.device_ms[i] / widths[k]
        weights = self.marginal_ms(degree)
        chosen = least_loaded_assignment(rest, weights, self.lengths, rooms, [degree / w for w in widths], loads)
        if chosen is None:
            return None
        owners = np.array(list(range(len(own))) + chosen, dtype=np.int64)
        # Renumber the groups that received samples 0, 1, ...
        used = np.bincount(owners, minlength=len(widths)) > 0
        owners = (np.cumsum(used) - 1)[owners]
        return np.array(own + rest, dtype=np.int64), owners, int(used.sum())

    # ------------------------------------------------------------------ local search
    def _improve(self, groups: list[_Group], makespan: float, window: int) -> list[_Group]:
        evaluations = 0
        for _ in range(self.limits.max_moves):
            built = self._matrix(groups, window, margin=_MOVE_MARGIN)
            if built is None or evaluations >= self.limits.max_evaluations:
                break
            base, spare = built
            extra = realise(base, spare, makespan)
            times = base[np.arange(len(groups)), extra]
            moves = list(self._neighbours(groups, int(np.argmax(times)), times))
            moves = moves[: self.limits.max_evaluations - evaluations]
            evaluations += len(moves)
            self._groups([g for _, added in moves for g in added], window + _MOVE_MARGIN)
            target = makespan * (1 - _IMPROVEMENT_RTOL)
            best: tuple[float, list[_Group]] | None = None
            for removed, added in moves:
                built = self._moved_matrix(groups, base, spare, removed, self._groups(added), window)
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
                      added: list[_Group], window: int) -> tuple[np.ndarray, int] | None:
        """The time matrix after a move, from the current one (`base`, `spare`) without rebuilding it."""
        count = len(groups) - len(removed) + len(added)
        new_spare = spare + sum(groups[k].min_degree for k in removed) - sum(g.min_degree for g in added)
        if count > self.num_ranks or new_spare < 0 or any(g.min_degree > self.top_degree for g in added):
            return None
        width = min(new_spare + 1, window)
        if width > base.shape[1]:
            return self._matrix([g for k, g in enumerate(groups) if k not in removed] + added, window)
        keep = np.ones(len(groups), dtype=bool)
        keep[list(removed)] = False
        return np.concatenate([base[keep, :width], self._rows(added, width)]), new_spare

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
    def _initial_window(self, groups: int) -> int:
        """Degree window of a grouping of this many groups: twice the average group size + slack."""
        return 2 * -(-self.num_ranks // max(1, groups)) + _WINDOW_SLACK

    def _groups(self, grouping: Sequence[tuple[int, ...]], width: int = 1) -> list[_Group]:
        """The groups of `grouping`; new ones are evaluated together on their first `width` degrees
        (more are added on demand by `_matrix`)."""
        new = [g for g in dict.fromkeys(grouping) if g not in self._known]
        if new:
            workloads, tokens = self.facts.workloads.groups(new)
            mins = [min_degree_for(t, self.capacity_tokens) for t in tokens.tolist()]
            times, algos = self.timer.evaluate(workloads, mins, self.top_degree, width)
            for k, (g, m) in enumerate(zip(new, mins)):
                self._known[g] = _Group(g, m, times[k], algos[k])
        return [self._known[g] for g in grouping]

    def _widen(self, groups: list[_Group], width: int) -> None:
        """Evaluates more degrees for groups known on fewer than `width` (up to the top degree)."""
        short = [g for g in groups if len(g.times) < min(width, self.top_degree - g.min_degree + 1)]
        if short:
            # Some slack, so that neighbouring moves with a little more spare reuse the rows.
            workloads, _ = self.facts.workloads.groups([g.samples for g in short])
            times, algos = self.timer.evaluate(workloads, [g.min_degree for g in short], self.top_degree, width + 8)
            for k, g in enumerate(short):
                g.times, g.algos = times[k], algos[k]

    def _rows(self, groups: list[_Group], width: int) -> np.ndarray:
        """times[k, s] of group k on min_degree + s ranks, s < width (inf beyond what is known)."""
        self._widen(groups, width)
        rows = [g.times[:width] for g in groups]
        if all(len(row) == width for row in rows):
            return np.array(rows).reshape(len(rows), width)
        times = np.full((len(groups), width), np.inf)
        for k, row in enumerate(rows):
            times[k, : len(row)] = row
        return times

    def _matrix(self, groups: list[_Group], window: int, margin: int = 0) -> tuple[np.ndarray, int] | None:
        """(times[k, s] of group k on min_degree + s ranks, spare ranks), None when the groups cannot
        fit; at most `window` degrees per group, and `margin` more columns for moves that free ranks."""
        if len(groups) > self.num_ranks:
            return None
        spare = self.num_ranks - sum(g.min_degree for g in groups)
        if spare < 0 or max(g.min_degree for g in groups) > self.top_degree:
            return None
        return self._rows(groups, min(spare + 1, window) + margin), spare

    def _split(self, groups: list[_Group], window: int) -> tuple[float, int, np.ndarray, int] | None:
        """(optimal makespan, window used, time matrix, spare ranks), the window doubled while a group
        that sets the makespan could still shorten beyond it; None when the groups cannot fit."""
        while True:
            built = self._matrix(groups, window)
            if built is None:
                return None
            times, spare = built
            makespan = optimal_makespan(times, spare)
            if not math.isfinite(makespan) or times.shape[1] > spare or not _at_window_edge(times, makespan):
                return makespan, window, times, spare
            window *= 2

    def _min_degree_sum(self, grouping: list[tuple[int, ...]]) -> int:
        return sum(min_degree_for(sum(self.lengths[i] for i in g), self.capacity_tokens) for g in grouping)

    def _realise(self, groups: list[_Group], window: int) -> RoundChoice:
        split = self._split(groups, window)
        if split is None or not math.isfinite(split[0]):
            raise AssertionError("a round that fitted before the local search no longer fits")
        makespan, _, times, spare = split
        return self._chosen(groups, times, realise(times, spare, makespan))

    def _chosen(self, groups: list[_Group], times: np.ndarray, extra: np.ndarray) -> RoundChoice:
        """The round with group k on min_degree + extra[k] ranks (times[k, s] as in `_matrix`)."""
        chosen = [
            GroupChoice(g.samples, g.min_degree + int(s), self.timer.cost.algos[int(g.algos[s])], float(times[k, s]))
            for k, (g, s) in enumerate(zip(groups, extra.tolist()))
        ]
        return RoundChoice(tuple(sorted(chosen, key=lambda c: c.samples)), max(c.predicted_ms for c in chosen))


def _at_window_edge(times: np.ndarray, makespan: float) -> bool:
    """Whether a group whose shortest time in its window is at the window's last degree sets the
    makespan (so a wider window might shorten it)."""
    best = times.min(axis=1)
    return bool(np.any((times[:, -1] <= best) & (best >= makespan)))


def _owned_tuples(members: np.ndarray, owners: np.ndarray) -> list[tuple[int, ...]]:
    """Ascending sample tuples of the non-empty groups, in owner order."""
    if members.size == 0:
        return []
    order = np.lexsort((members, owners))
    ordered = members[order].tolist()
    ends = np.cumsum(np.bincount(owners)).tolist()
    return [tuple(ordered[begin:end]) for begin, end in zip([0, *ends], ends) if end > begin]


def _grouping(members: np.ndarray, owners: np.ndarray) -> list[tuple[int, ...]]:
    """Ascending sample tuples of the groups (owners numbered 0, 1, ...), in ascending order."""
    return sorted(_owned_tuples(members, owners))


def _assignment(grouping: Sequence[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray, int]:
    """(members, owners, group count) of a grouping."""
    sizes = [len(g) for g in grouping]
    members = np.fromiter((i for g in grouping for i in g), dtype=np.int64, count=sum(sizes))
    return members, np.repeat(np.arange(len(grouping)), sizes), len(grouping)
