"""Stage 2: choose every atomic group's degree so the slowest group finishes first.

Problem: K groups, group k needs at least m_k ranks; give group k degree m_k + s_k with
sum(s_k) == spare (= N - sum(m_k)) so that max_k T_k(m_k + s_k) is minimal. The input is the matrix
`extra_times[k, s] = T_k(m_k + s)` (best algo; inf where infeasible).

Two exact solvers compute the optimal makespan:
- `dp_makespan`: the 2D dynamic program F[k][j] = min_s max(F[k-1][j - s], T_k(m_k + s)),
  vectorised over j, O(K * spare^2);
- `threshold_makespan`: search over the candidate makespans tau. For a given tau every group may take
  the extra ranks {s : T_k(m_k + s) <= tau}; a degree vector exists iff `spare` is a sum of one choice
  per group. Groups whose choices form an interval contribute an interval of sums; the others are
  combined with bit-set shifts. A closed-form necessary threshold is usually already feasible, so
  the search mostly costs two partial sorts and one check. Exact for any time curves, fast for large N.
`assign_degrees` picks the cheaper one, then `realise` builds the degrees: every group stays within
the optimal makespan, spare ranks go where they shorten a group the most.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

# Above this many DP cell updates (K * (spare + 1)^2), or this many groups (one numpy pass each), the
# threshold search is used instead.
_DP_WORK_LIMIT = 500
_DP_GROUP_LIMIT = 8


@dataclass(frozen=True)
class DegreeChoice:
    """Extra ranks per group on top of its minimum degree, and the resulting makespan."""

    extra: np.ndarray
    """int64 [K]: ranks given to group k beyond its minimum degree; sums to the spare ranks."""
    makespan: float
    """max_k T_k(m_k + extra_k): the slowest group's time."""


def dp_makespan(extra_times: np.ndarray, spare: int) -> float:
    """Optimal makespan by the plain dynamic program (inf when no exact split of `spare` exists)."""
    times = _clip(extra_times, spare)
    if times.shape[1] < spare + 1:
        times = np.concatenate([times, np.full((times.shape[0], spare + 1 - times.shape[1]), np.inf)], axis=1)
    width = spare + 1
    best = times[0].copy()  # best[j]: optimal makespan of the groups so far using exactly j extra ranks
    j = np.arange(width)[:, None]
    s = np.arange(width)[None, :]
    rest = j - s
    valid = rest >= 0
    rest = np.where(valid, rest, 0)
    for k in range(1, times.shape[0]):
        candidates = np.maximum(best[rest], times[k][None, :])
        best = np.where(valid, candidates, np.inf).min(axis=1)
    return float(best[spare])


def threshold_makespan(extra_times: np.ndarray, spare: int) -> float:
    """Optimal makespan by threshold search (inf when infeasible).

    Two necessary conditions hold at any feasible tau: the smallest allowed extras sum to at most
    `spare` and the largest to at least `spare`. Both are monotone in tau and their least tau is an
    order statistic (`_necessary_threshold`); when that tau is feasible it is optimal, which is the
    common case. Otherwise a binary search runs over the candidate times above it.
    """
    times = _clip(extra_times, spare)
    floor = _necessary_threshold(times, spare)
    if not np.isfinite(floor):
        return float("inf")
    if _feasible(times, spare, floor):
        return floor
    ceiling = _greedy_makespan(times, spare)
    if not np.isfinite(ceiling):
        finite = times[np.isfinite(times)]
        ceiling = float(finite.max())
        if not _feasible(times, spare, ceiling):
            return float("inf")
    candidates = np.unique(times[(times > floor) & (times <= ceiling)])
    lo, hi = 0, len(candidates) - 1  # candidates[hi] is feasible
    while lo < hi:
        mid = (lo + hi) // 2
        if _feasible(times, spare, float(candidates[mid])):
            hi = mid
        else:
            lo = mid + 1
    return float(candidates[hi])


def _necessary_threshold(times: np.ndarray, spare: int) -> float:
    """Least tau with sum_k lo_k(tau) <= spare <= sum_k hi_k(tau), where lo_k / hi_k are the first /
    last extra whose time is <= tau; no smaller makespan can be feasible.

    With P = prefix minima of each row, lo_k(tau) = #{s : P[k, s] > tau}, so the first condition holds
    from the (spare + 1)-th largest P on (rows narrower than spare + 1 columns: once tau reaches every
    row's minimum, which any feasible tau does). With Q = suffix minima, hi_k(tau) + 1 =
    #{s : Q[k, s] <= tau}, so the second holds from the (spare + K)-th smallest Q on.
    """
    k, width = times.shape
    prefix = np.minimum.accumulate(times, axis=1)
    row_floor = prefix[:, -1].max()
    prefix = prefix.ravel()
    if spare + k > prefix.size:
        return float("inf")
    suffix = np.minimum.accumulate(times[:, ::-1], axis=1).ravel()
    by_lo = -np.partition(-prefix, spare)[spare] if spare < prefix.size else -np.inf
    by_hi = np.partition(suffix, spare + k - 1)[spare + k - 1]
    return float(max(by_lo, by_hi, row_floor))


def optimal_makespan(extra_times: np.ndarray, spare: int) -> float:
    """Optimal makespan (inf when the spare ranks cannot be split exactly), by the cheaper solver."""
    if spare < 0 or extra_times.shape[0] == 0:
        return float("inf")
    if extra_times.shape[0] <= _DP_GROUP_LIMIT and extra_times.shape[0] * (spare + 1) ** 2 <= _DP_WORK_LIMIT:
        return dp_makespan(extra_times, spare)
    return threshold_makespan(extra_times, spare)


def beats(extra_times: np.ndarray, spare: int, makespan: float) -> bool:
    """Whether some split of the spare ranks keeps every group at or under `makespan`."""
    if spare < 0 or extra_times.shape[0] == 0:
        return False
    times = _clip(extra_times, spare)
    return _necessary_threshold(times, spare) <= makespan and _feasible(times, spare, makespan)


def assign_degrees(extra_times: np.ndarray, spare: int) -> DegreeChoice | None:
    """Optimal extra ranks per group (None when the spare ranks cannot be split exactly)."""
    makespan = optimal_makespan(extra_times, spare)
    if not np.isfinite(makespan):
        return None
    return DegreeChoice(realise(extra_times, spare, makespan), makespan)


def realise(extra_times: np.ndarray, spare: int, makespan: float) -> np.ndarray:
    """Extra ranks per group summing to `spare`, every group within `makespan`.

    When one allowed interval per group can hold the sum (`_interval_witness`), the spare ranks are
    filled greedily inside those intervals (each next rank where it saves the most time). Otherwise
    the groups whose allowed extras are not intervals are fixed first by backtracking through
    reachable-sum bit sets, then the interval groups are filled.
    """
    times = _clip(extra_times, spare)
    allowed = times <= makespan
    witness = _interval_witness(allowed, spare)
    if witness is not None:
        first, last = witness
        extra = first.copy()
        _fill_greedily(times, extra, last, np.arange(len(extra)), spare - int(first.sum()))
        return extra
    lo, hi, is_interval = _ranges(allowed)
    extra = lo.copy()
    general = np.flatnonzero(~is_interval)
    interval_rows = np.flatnonzero(is_interval)
    interval_lo = int(lo[interval_rows].sum())
    interval_hi = int(hi[interval_rows].sum())
    target = spare
    prefixes = [_range_mask(interval_lo, interval_hi, spare)]
    for runs in _runs(allowed[general]):
        prefixes.append(_shift_union(prefixes[-1], runs, spare))
    for pos in range(len(general) - 1, -1, -1):
        k = general[pos]
        before = prefixes[pos]
        choices = np.flatnonzero(allowed[k, : target + 1])
        reachable = [s for s in choices.tolist() if (before >> (target - s)) & 1]
        s_k = min(reachable, key=lambda s: (times[k, s], s))
        extra[k] = s_k
        target -= s_k
    remaining = target - interval_lo
    if remaining < 0 or remaining > interval_hi - interval_lo:
        raise AssertionError("makespan passed to realise() is not feasible")
    _fill_greedily(times, extra, hi, interval_rows, remaining)
    return extra


def _fill_greedily(times: np.ndarray, extra: np.ndarray, hi: np.ndarray, rows: np.ndarray, count: int) -> None:
    """Adds `count` ranks to `rows` (each staying within its `hi`), largest time reductions first.

    Step j of row k saves times[k, extra_k + j] - times[k, extra_k + j + 1]; savings are capped by
    the ones before them in the row, so the `count` largest always form a prefix of every row.
    """
    if count == 0:
        return
    steps = hi[rows] - extra[rows]
    width = int(steps.max())
    j = np.arange(width)[None, :]
    valid = j < steps[:, None]
    at = np.minimum(extra[rows][:, None] + j, times.shape[1] - 2)
    with np.errstate(invalid="ignore"):
        saving = np.where(valid, times[rows[:, None], at] - times[rows[:, None], at + 1], -np.inf)
    saving = np.minimum.accumulate(saving, axis=1)
    picked = np.argsort(-saving, axis=None, kind="stable")[:count]
    extra[rows] += np.bincount(picked // width, minlength=len(rows))


def _feasible(times: np.ndarray, spare: int, makespan: float) -> bool:
    """Whether one allowed extra per group (time <= makespan) sums to exactly `spare`."""
    allowed = times <= makespan
    if not allowed.any(axis=1).all():
        return False
    lo, hi, is_interval = _ranges(allowed)
    if lo.sum() > spare or hi.sum() < spare:
        return False
    if is_interval.all() or _interval_witness(allowed, spare) is not None:
        return True
    rows = np.flatnonzero(is_interval)
    reach = _range_mask(int(lo[rows].sum()), int(hi[rows].sum()), spare)
    for runs in _runs(allowed[~is_interval]):
        reach = _shift_union(reach, runs, spare)
    return bool((reach >> spare) & 1)


def _interval_witness(allowed: np.ndarray, spare: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-group intervals of allowed extras whose sums bracket `spare`, if a simple choice works.

    Tries every group on its first run of allowed extras, then every group on its last run (for
    interval groups both are the whole interval). None when neither brackets `spare`.
    """
    width = allowed.shape[1]
    lo, hi, _ = _ranges(allowed)
    cols = np.arange(width)[None, :]
    # first run: from lo to just before the first forbidden column after lo
    gap_after = ~allowed & (cols > lo[:, None])
    first_end = np.where(gap_after.any(axis=1), gap_after.argmax(axis=1) - 1, width - 1)
    if lo.sum() <= spare <= first_end.sum():
        return lo, first_end.astype(np.int64)
    # last run: from just after the last forbidden column before hi, to hi
    gap_before = ~allowed & (cols < hi[:, None])
    last_start = np.where(gap_before.any(axis=1), width - gap_before[:, ::-1].argmax(axis=1), 0)
    if last_start.sum() <= spare <= hi.sum():
        return last_start.astype(np.int64), hi
    return None


def _runs(allowed_rows: np.ndarray) -> list[list[tuple[int, int]]]:
    """(start, stop) of every run of allowed columns, per row (stop exclusive)."""
    padded = np.zeros((allowed_rows.shape[0], allowed_rows.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = allowed_rows
    rows, cols = np.nonzero(np.diff(padded, axis=1))
    out: list[list[tuple[int, int]]] = [[] for _ in range(allowed_rows.shape[0])]
    for k, start, stop in zip(rows[::2].tolist(), cols[::2].tolist(), cols[1::2].tolist()):
        out[k].append((start, stop))
    return out


def _ranges(allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: first and last allowed column, and whether the allowed columns are contiguous."""
    width = allowed.shape[1]
    lo = allowed.argmax(axis=1)
    hi = width - 1 - allowed[:, ::-1].argmax(axis=1)
    is_interval = allowed.sum(axis=1) == hi - lo + 1
    return lo.astype(np.int64), hi.astype(np.int64), is_interval


def _range_mask(lo: int, hi: int, spare: int) -> int:
    """Bit set {lo..min(hi, spare)}."""
    hi = min(hi, spare)
    if lo > hi:
        return 0
    return ((1 << (hi - lo + 1)) - 1) << lo


def _shift_union(reach: int, runs: list[tuple[int, int]], spare: int) -> int:
    """Union over s in the runs of (reach shifted by s), truncated to sums <= spare (bit sets as ints)."""
    out = 0
    for start, stop in runs:
        # Union of shifts by start..stop-1: shifted copies doubling in count.
        run = reach << start
        covered = 1
        length = stop - start
        while covered < length:
            step = min(covered, length - covered)
            run |= run << step
            covered += step
        out |= run
    return out & ((1 << (spare + 1)) - 1)


def _greedy_makespan(times: np.ndarray, spare: int) -> float:
    """Makespan of a quick feasible split: each next spare rank to the currently slowest group."""
    extra = np.zeros(times.shape[0], dtype=np.int64)
    width = times.shape[1]
    heap = [(-float(times[k, 0]), k) for k in range(times.shape[0])]
    heapq.heapify(heap)
    for _ in range(spare):
        while heap:
            _, k = heapq.heappop(heap)
            if extra[k] + 1 < width and np.isfinite(times[k, extra[k] + 1]):
                extra[k] += 1
                heapq.heappush(heap, (-float(times[k, extra[k]]), k))
                break
        else:
            return float("inf")
    return float(times[np.arange(times.shape[0]), extra].max())


def _clip(extra_times: np.ndarray, spare: int) -> np.ndarray:
    """At most the first spare + 1 columns (a narrower matrix stands for inf in the columns it lacks)."""
    return np.asarray(extra_times, dtype=np.float64)[:, : spare + 1]
