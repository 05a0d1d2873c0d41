"""Memoised cost-model queries: best time and algo of a packed batch over a window of degrees.

Each query costs one cost-model call per workload, so the planner asks for many windows at once
(`prepare`). A cost model that offers `best_time_table(workloads, degrees)` -- `degrees` an int
[K, W] matrix, row k for workload k, returning (times [K, W], algo index [K, W]) like `best_time_ms`
row by row -- answers a whole request in one call; otherwise the workloads are evaluated one by one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel


class GroupTimer:
    """Best-algo times of workloads on degrees 1..max_degree, each (workload, degree) computed once."""

    def __init__(self, cost: "CostModel", max_degree: int) -> None:
        self.cost = cost
        self.max_degree = max_degree
        # workload -> (first degree, times, algo indices) of the window computed so far.
        self._cache: dict[Any, tuple[int, np.ndarray, np.ndarray]] = {}
        self.cost_calls = 0
        """Cost-model calls made so far."""

    def prepare(self, requests: Sequence[tuple[Any, int, int]]) -> None:
        """Makes sure every (workload, lo, hi) window of degrees is known, in as few calls as possible."""
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
        table = getattr(self.cost, "best_time_table", None)
        if table is not None:
            width = max(hi - lo + 1 for lo, hi in wanted.values())
            firsts = np.array([wanted[w][0] for w in workloads], dtype=np.int64)
            degrees = np.minimum(firsts[:, None] + np.arange(width)[None, :], self.max_degree)
            times, algos = table(workloads, degrees)
            self.cost_calls += 1
            for k, workload in enumerate(workloads):
                lo, hi = wanted[workload]
                count = hi - lo + 1
                self._cache[workload] = (lo, np.asarray(times[k, :count], dtype=np.float64),
                                         np.asarray(algos[k, :count], dtype=np.int64))
            return
        for workload in workloads:
            lo, hi = wanted[workload]
            times, algos = self.cost.best_time_ms(workload, np.arange(lo, hi + 1))
            self.cost_calls += 1
            self._cache[workload] = (lo, np.asarray(times, dtype=np.float64).reshape(-1),
                                     np.asarray(algos, dtype=np.int64).reshape(-1))

    def window(self, workload: Any, lo: int, hi: int) -> np.ndarray:
        """Times on degrees lo..hi (inf above max_degree); computes the window if needed."""
        self.prepare([(workload, lo, hi)])
        out = np.full(hi - lo + 1, np.inf)
        first, times, _ = self._cache[workload]
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
