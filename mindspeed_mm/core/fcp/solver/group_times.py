"""Cost-model queries: best time and algo of packed batches over windows of degrees.

The planner asks for many workloads at once through the cost model's `best_time_table(workloads,
degrees)` -- `degrees` an int [K, W] matrix, row k for workload k, returning (times [K, W], algo index
[K, W]) equal to `best_time_ms` row by row. `workload_columns(lengths, patches)` (one workload per
sample, as columns whose `group_sums` are packed batches) lets `SampleWorkloads` build the workloads
of many groups in a few array operations; a model whose workloads are not columns returns None there
and gets one `workload` call per group.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel


class SampleWorkloads:
    """The workload of each sample alone (by index, memoised) and of groups of samples."""

    def __init__(self, cost: "CostModel", lengths: Sequence[int], patches: Sequence[int] | None) -> None:
        """`lengths` and `patches` may be lists or int arrays (arrays spare the cost model a conversion)."""
        self._cost = cost
        self.columns: WorkloadColumns | None = cost.workload_columns(lengths, patches)
        """Per-sample columns, when the cost model answers queries on columns (`CostModel` always
        does; a model whose workloads are not columns returns None); else None."""
        if self.columns is None:
            # Plain ints for the per-workload calls.
            lengths = [int(x) for x in lengths]
            patches = None if patches is None else [int(x) for x in patches]
        self._lengths = lengths
        self._patches = patches
        self._single: dict[int, Any] = {}
        self._total: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._lengths)

    def __getitem__(self, i: int) -> Any:
        """The workload of sample i alone."""
        found = self._single.get(i)
        if found is None:
            if self.columns is not None:
                found = self.columns.workload(i)
            else:
                found = self._cost.workload([self._lengths[i]], None if self._patches is None else [self._patches[i]])
            self._single[i] = found
        return found

    def every_sample(self) -> Any:
        """The workloads of all samples, in order, as `GroupTimer.evaluate` takes them."""
        if self.columns is not None:
            return self.columns
        return [self[i] for i in range(len(self._lengths))]

    def singles_and_empty(self) -> Any:
        """The workloads of every sample alone, in order, then of an empty batch, as
        `GroupTimer.evaluate` takes them."""
        if self.columns is not None:
            return WorkloadColumns(np.concatenate([self.columns.values, np.zeros((1, 4))]))
        return [self[i] for i in range(len(self._lengths))] + [self._cost.workload([])]

    def groups(self, groups: Sequence[Sequence[int]]) -> tuple[Any, np.ndarray]:
        """(the workloads of packed batches of samples, as `GroupTimer.evaluate` takes them, and
        their LLM tokens)."""
        sizes = [len(g) for g in groups]
        members = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=sum(sizes))
        return self.assigned(members, np.repeat(np.arange(len(groups)), sizes), len(groups))

    def each_group(self, groups: Sequence[Sequence[int]]) -> tuple[list[Any], list[int]]:
        """(the workload of each packed batch as one object, as `CostModel.best_time_ms` takes it, and
        their LLM tokens)."""
        batches, tokens = self.groups(groups)
        if isinstance(batches, WorkloadColumns):
            return [batches.workload(k) for k in range(len(batches))], tokens.tolist()
        return list(batches), tokens.tolist()

    def exchanged(self, groups: Sequence[Sequence[int]], rows: np.ndarray, minus: np.ndarray,
                  plus: np.ndarray) -> Any:
        """Workloads of changed groups, as `GroupTimer.evaluate` takes them: row k is group rows[k]
        without sample minus[k] and with sample plus[k] (-1: none)."""
        if self.columns is not None:
            sizes = [len(g) for g in groups]
            members = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=sum(sizes))
            base = self.columns.group_sums(members, np.repeat(np.arange(len(groups)), sizes), len(groups)).values
            values = self.columns.values
            out = base[rows]
            out -= np.where((minus >= 0)[:, None], values[np.maximum(minus, 0)], 0.0)
            out += np.where((plus >= 0)[:, None], values[np.maximum(plus, 0)], 0.0)
            return WorkloadColumns(out)
        changed = []
        for row, out_sample, in_sample in zip(rows.tolist(), minus.tolist(), plus.tolist()):
            batch = [i for i in groups[row] if i != out_sample] + ([in_sample] if in_sample >= 0 else [])
            changed.append(batch)
        return self.groups(changed)[0]

    def outside(self, left_out: np.ndarray, alone: np.ndarray | None = None) -> Any:
        """Workloads of packed batches, as `GroupTimer.evaluate` takes them: batch k holds every sample i
        with left_out[k, i] False (a bool [K, samples] matrix); then, if given, each sample of `alone`
        by itself."""
        if self.columns is not None:
            # The whole batch minus the samples left out: sums of integers, exact in float64.
            if self._total is None:
                self._total = self.columns.values.sum(axis=0)
            rows, members = np.nonzero(left_out)
            values = self._total - self.columns.group_sums(members, rows, left_out.shape[0]).values
            if alone is not None:
                values = np.concatenate([values, self.columns.values[alone]])
            return WorkloadColumns(values)
        rows, members = np.nonzero(~left_out)
        batches = list(self.assigned(members, rows, left_out.shape[0])[0])
        return batches + ([] if alone is None else [self[i] for i in alone.tolist()])

    def assigned(self, members: np.ndarray, owners: np.ndarray, count: int) -> tuple[Any, np.ndarray]:
        """Like `groups`, for `count` batches given as sample members[j] in batch owners[j]."""
        if self.columns is not None:
            sums = self.columns.group_sums(members, owners, count)
            return sums, sums.values[:, 0].astype(np.int64)
        batches: list[list[int]] = [[] for _ in range(count)]
        for i, k in zip(members.tolist(), owners.tolist()):
            batches[k].append(i)
        patches = self._patches
        lengths = self._lengths
        workloads = [self._cost.workload([lengths[i] for i in b], None if patches is None else [patches[i] for i in b])
                     for b in batches]
        return workloads, np.array([sum(lengths[i] for i in b) for b in batches], dtype=np.int64)


class GroupTimer:
    """Best-algo times of workloads on degrees 1..max_degree, with a memo for single lookups."""

    def __init__(self, cost: "CostModel", max_degree: int, allowed: Sequence[int] | None = None) -> None:
        self.cost = cost
        self.max_degree = max_degree
        self._barred: np.ndarray | None = None
        if allowed is not None:
            # barred[d]: degree d may not be used (SolverConfig.degrees); inf times there.
            self._barred = np.ones(max_degree + 1, dtype=bool)
            self._barred[[d for d in allowed if d <= max_degree]] = False
        self.cost_calls = 0
        """Cost-model calls made so far."""
        # workload -> (first degree, times, algo indices) of the window computed so far.
        self._cache: dict[Any, tuple[int, np.ndarray, np.ndarray]] = {}

    def allowed_degrees(self) -> list[int]:
        """The degrees 1 .. max_degree groups may have (all, unless SolverConfig.degrees restricts them)."""
        if self._barred is None:
            return list(range(1, self.max_degree + 1))
        return [d for d in range(1, self.max_degree + 1) if not self._barred[d]]

    def evaluate(
        self, workloads: Sequence[Any] | WorkloadColumns, firsts: Sequence[int], top: int, width: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """times[k, s], algos[k, s]: workload k on firsts[k] + s ranks, s < width (default: up to
        `top` for the smallest first degree); inf above `top` or `max_degree`."""
        top = min(top, self.max_degree)
        firsts_arr = np.asarray(firsts, dtype=np.int64)
        if width is None:
            width = max(1, top - int(firsts_arr.min()) + 1)
        degrees = firsts_arr[:, None] + np.arange(width, dtype=np.int64)[None, :]
        clipped = firsts_arr.size > 0 and int(firsts_arr.max()) + width - 1 > top
        if clipped:
            beyond = degrees > top
            degrees = np.minimum(degrees, max(top, 1))
        times, algos = self.cost.best_time_table(
            workloads if isinstance(workloads, WorkloadColumns) else list(workloads), degrees)
        times = np.asarray(times, dtype=np.float64)
        algos = np.asarray(algos, dtype=np.int64)
        self.cost_calls += 1
        if clipped:
            times[beyond] = np.inf
        if self._barred is not None:
            times[self._barred[degrees]] = np.inf
        return times, algos

    def prepare(self, requests: Sequence[tuple[Any, int, int]]) -> None:
        """Memoises every (workload, lo, hi) window of degrees, in one batch of queries."""
        wanted: dict[Any, tuple[int, int]] = {}
        for workload, lo, hi in requests:
            lo, hi = max(1, lo), min(self.max_degree, hi)
            if hi < lo:
                continue
            known = self._cache.get(workload)
            if known is not None and known[0] <= lo and hi < known[0] + len(known[1]):
                continue
            if known is not None:
                lo, hi = min(lo, known[0]), max(hi, known[0] + len(known[1]) - 1)
            if workload in wanted:
                lo, hi = min(lo, wanted[workload][0]), max(hi, wanted[workload][1])
            wanted[workload] = (lo, hi)
        if not wanted:
            return
        workloads = list(wanted)
        firsts = [wanted[w][0] for w in workloads]
        width = max(hi - lo + 1 for lo, hi in wanted.values())
        times, algos = self.evaluate(workloads, firsts, self.max_degree, width)
        for k, workload in enumerate(workloads):
            lo, hi = wanted[workload]
            self._cache[workload] = (lo, times[k, : hi - lo + 1], algos[k, : hi - lo + 1])

    def window(self, workload: Any, lo: int, hi: int) -> np.ndarray:
        """Times on degrees lo..hi (inf above max_degree), memoised."""
        self.prepare([(workload, lo, hi)])
        first, times, _ = self._cache[workload]
        out = np.full(hi - lo + 1, np.inf)
        top = min(hi, self.max_degree)
        if top >= lo:
            out[: top - lo + 1] = times[lo - first: top - first + 1]
        return out

    def time(self, workload: Any, degree: int) -> float:
        """Best time of `workload` on `degree` ranks."""
        return float(self.window(workload, degree, degree)[0])

    def algo(self, workload: Any, degree: int) -> str:
        """Name of the fastest algo for `workload` on `degree` ranks."""
        self.prepare([(workload, degree, degree)])
        first, _, algos = self._cache[workload]
        return self.cost.algos[int(algos[degree - first])]
