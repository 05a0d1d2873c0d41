"""Exact reference: the planning problem solved to optimality, for small batches.

Same problem and constraints as `plan_batch`: every sample in exactly one group; a group of samples S
runs on d ranks with min_degree(S) <= d <= max_degree at its best algo's time T(S, d) (finite); in
every round the degrees sum to exactly N; the step time is the sum of the round makespans. Contiguous
node-aware placement never changes a predicted time, so it is applied afterwards, as in the planner.

Two formulations, both solved with scipy's HiGHS `milp`:
- "rounds" (default): set partitioning over rounds. Every subset U of samples is a candidate round
  whose cost f(U) is its optimal one-round makespan, computed exactly by a dynamic program over
  (subset, ranks): h(U, n) = min over groups S containing U's first sample and degrees d of
  max(T(S, d), h(U - S, n - d)), f(U) = h(U, N). The MILP picks the rounds: every sample in exactly
  one, minimal total cost.
- "groups": set partitioning over (S, d, r) group candidates with makespan variables M_r >= T(S, d)
  x[S, d, r] and sum of degrees per used round == N. Rounds are ordered by their smallest sample
  (a candidate may only use a round r <= min(S)). It states the problem directly but solves slowly
  beyond about 6 samples; it cross-checks the "rounds" formulation on tiny batches.
An optional known step time (e.g. the heuristic's) prunes "groups" candidates slower than it and caps
the number of rounds, which cannot cut off a better plan.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import reduce
from operator import add
from typing import TYPE_CHECKING, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.group_times import GroupTimer
from mindspeed_mm.core.fcp.solver.hybrid_split import with_hybrid_splits
from mindspeed_mm.core.fcp.solver.placement import place_groups
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, Plan, RoundPlan, SolverConfig
from mindspeed_mm.core.fcp.solver.lengths import checked_sample_lengths

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel

MAX_EXACT_SAMPLES = 12
"""Largest batch the exact model accepts (it enumerates every subset of samples)."""
_PRUNE_RTOL = 1e-9


@dataclass(frozen=True)
class ExactResult:
    """Outcome of the exact model."""

    status: str
    """"optimal", "time_limit" (best found plan, not proven), or "infeasible"."""
    objective_ms: float
    """Step time of the best plan found (inf when none)."""
    bound_ms: float
    """Proven lower bound on the optimal step time (equals objective_ms when optimal)."""
    solve_ms: float
    """Wall-clock time of building and solving the model."""
    plan: Plan | None
    """The best plan found, placed on ranks like the planner's (None when infeasible)."""


def solve_exact(
    lengths: Sequence[int],
    cost: "CostModel",
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    method: str = "rounds",
    time_limit_s: float = 60.0,
    known_step_ms: float | None = None,
) -> ExactResult:
    """Optimal plan of a small batch (at most `MAX_EXACT_SAMPLES` samples); see the module docstring.

    `known_step_ms`, the step time of any feasible plan, only speeds the "groups" solve up.
    """
    started = time.perf_counter()
    n = len(lengths)
    if not 1 <= n <= MAX_EXACT_SAMPLES:
        raise ValueError(f"the exact model takes 1..{MAX_EXACT_SAMPLES} samples, got {n}")
    lengths = checked_sample_lengths(lengths).tolist()
    if method not in ("rounds", "groups"):
        raise ValueError(f"method must be 'rounds' or 'groups', got {method!r}")
    n_ranks = config.num_ranks
    top = min(config.degree_limit, n_ranks)
    timer = GroupTimer(cost, top)
    singles = [cost.workload([int(lengths[i])], None if patches is None else [int(patches[i])]) for i in range(n)]
    # Subsets as bit masks: bit i set = sample i in the subset.
    masks = range(1, 1 << n)
    members = {u: tuple(i for i in range(n) if u >> i & 1) for u in masks}
    workloads = {u: reduce(add, (singles[i] for i in members[u])) for u in masks}
    lows = {u: cost.min_degree(sum(int(lengths[i]) for i in members[u])) for u in masks}
    usable = [u for u in masks if lows[u] <= top]
    timer.prepare([(workloads[u], lows[u], top) for u in usable])
    times = np.full((1 << n, top + 1), np.inf)  # times[u, d]: group of subset u on d ranks
    for u in usable:
        times[u, lows[u]:] = timer.window(workloads[u], lows[u], top)

    max_rounds = n if config.max_rounds is None else min(n, config.max_rounds)
    if method == "rounds":
        chosen, status, bound = _solve_by_rounds(times, n, n_ranks, max_rounds, time_limit_s)
    else:
        chosen, status, bound = _solve_by_groups(times, n, n_ranks, max_rounds, time_limit_s, known_step_ms)
    elapsed = (time.perf_counter() - started) * 1e3
    if chosen is None:
        return ExactResult(status, math.inf, bound, elapsed, None)
    plan = with_hybrid_splits(_plan(chosen, timer, workloads, members, config, elapsed), lengths, cost)
    return ExactResult(status, plan.predicted_ms, plan.predicted_ms if status == "optimal" else bound, elapsed, plan)


def _solve_by_rounds(times: np.ndarray, n: int, n_ranks: int, max_rounds: int, time_limit_s: float):
    """Round-partition MILP over exact one-round costs; returns ([(round, mask, degree)], status, bound)."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # scipy only where the exact model runs
    from scipy.sparse import coo_matrix

    best, choice = _one_round_costs(times, n, n_ranks)
    rounds = [u for u in range(1, 1 << n) if np.isfinite(best[u])]
    if not rounds:
        return None, "infeasible", math.inf
    rows, cols = [], []
    for j, u in enumerate(rounds):
        for i in range(n):
            if u >> i & 1:
                rows.append(i)
                cols.append(j)
    cover = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, len(rounds))).tocsr()
    count = np.ones((1, len(rounds)))
    result = milp(
        np.array([best[u] for u in rounds]),
        integrality=np.ones(len(rounds)),
        bounds=Bounds(0, 1),
        constraints=[LinearConstraint(cover, 1, 1), LinearConstraint(count, 1, max_rounds)],
        options={"time_limit": time_limit_s, "mip_rel_gap": 1e-9, "disp": False},
    )
    if result.x is None:
        return None, ("infeasible" if result.status == 2 else "time_limit"), _dual_bound(result)
    chosen = []
    for r, j in enumerate(np.flatnonzero(result.x > 0.5)):
        chosen.extend((r, s, d) for s, d in _backtrack(rounds[j], n_ranks, choice))
    return chosen, ("optimal" if result.status == 0 else "time_limit"), _dual_bound(result)


def _one_round_costs(times: np.ndarray, n: int, n_ranks: int) -> tuple[np.ndarray, dict]:
    """f(U) = optimal makespan of subset U alone in one round on exactly n_ranks ranks, for every U.

    h[U][k] = best makespan of U on exactly k ranks; the group holding U's lowest sample is S, on d
    ranks: h[U][k] = min over S, d of max(times[S, d], h[U - S][k - d]).
    """
    top = times.shape[1] - 1
    h = np.full((1 << n, n_ranks + 1), np.inf)
    h[0, 0] = 0.0
    k = np.arange(n_ranks + 1)[:, None]
    d = np.arange(1, top + 1)[None, :]
    rest = k - d
    valid = rest >= 0
    rest = np.where(valid, rest, 0)
    choice: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for u in range(1, 1 << n):
        low = u & -u
        others = u ^ low
        subs = []
        sub = others
        while True:
            subs.append(sub | low)
            if sub == 0:
                break
            sub = (sub - 1) & others
        subs_arr = np.array(subs)
        remaining = h[u ^ subs_arr]  # [S, k]
        # value[S, k, d] = max(times[S, d], h[U - S][k - d])
        value = np.maximum(times[subs_arr, 1:][:, None, :], np.where(valid[None], remaining[:, rest], np.inf))
        per_k = value.min(axis=2)  # [S, k]
        best_s = per_k.argmin(axis=0)  # [k]
        h[u] = per_k[best_s, np.arange(n_ranks + 1)]
        best_d = value[best_s, np.arange(n_ranks + 1)].argmin(axis=1) + 1
        choice[u] = (subs_arr[best_s], best_d)
    return h[:, n_ranks], choice


def _backtrack(u: int, n_ranks: int, choice: dict) -> list[tuple[int, int]]:
    """(group mask, degree) of the optimal one-round layout of subset u on n_ranks ranks."""
    out = []
    k = n_ranks
    while u:
        s, d = int(choice[u][0][k]), int(choice[u][1][k])
        out.append((s, d))
        u ^= s
        k -= d
    return out


def _dual_bound(result) -> float:
    bound = getattr(result, "mip_dual_bound", None)
    return math.inf if bound is None else float(bound)


def _solve_by_groups(times: np.ndarray, n: int, n_ranks: int, max_rounds: int, time_limit_s: float,
                     known_step_ms: float | None):
    """Direct (S, d, r) MILP; returns ([(round, mask, degree)], status, bound)."""
    cap = math.inf if known_step_ms is None else known_step_ms * (1 + _PRUNE_RTOL)
    groups = [(u, d, float(times[u, d])) for u in range(1, 1 << n) for d in range(1, times.shape[1])
              if np.isfinite(times[u, d]) and times[u, d] <= cap]
    if math.isfinite(cap):
        # Every round holds a different sample and lasts at least that sample's fastest time, so
        # R rounds take at least the R smallest of those times.
        alone = sorted(min((t for u, _, t in groups if u >> i & 1), default=math.inf) for i in range(n))
        max_rounds = min(max_rounds, max(1, int(np.searchsorted(np.cumsum(alone), cap, side="right"))))
    lowest = {u: (u & -u).bit_length() - 1 for u in range(1, 1 << n)}
    candidates = [(u, d, t, r) for u, d, t in groups for r in range(min(lowest[u] + 1, max_rounds))]
    if not candidates:
        return None, "infeasible", math.inf
    result = _solve_groups_milp(candidates, n, n_ranks, max_rounds, time_limit_s)
    if result.x is None:
        return None, ("infeasible" if result.status == 2 else "time_limit"), _dual_bound(result)
    picked = np.flatnonzero(result.x[: len(candidates)] > 0.5)
    chosen = [(candidates[j][3], candidates[j][0], candidates[j][1]) for j in picked]
    return chosen, ("optimal" if result.status == 0 else "time_limit"), _dual_bound(result)


def _solve_groups_milp(candidates: list, n: int, n_ranks: int, max_rounds: int, time_limit_s: float):
    """Builds and solves the MILP; variables: x (candidates), M (makespans), u (round used)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    c_count = len(candidates)
    m0, u0 = c_count, c_count + max_rounds
    n_vars = c_count + 2 * max_rounds
    rows, cols, vals, lower, upper = [], [], [], [], []

    def add_row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        row = len(lower)
        for col, val in entries:
            rows.append(row)
            cols.append(col)
            vals.append(val)
        lower.append(lo)
        upper.append(hi)

    for i in range(n):
        add_row([(j, 1.0) for j, cand in enumerate(candidates) if cand[0] >> i & 1], 1.0, 1.0)
    for r in range(max_rounds):
        entries = [(j, float(cand[1])) for j, cand in enumerate(candidates) if cand[3] == r]
        add_row(entries + [(u0 + r, -float(n_ranks))], 0.0, 0.0)
        if r > 0:
            add_row([(u0 + r - 1, 1.0), (u0 + r, -1.0)], 0.0, np.inf)
    for j, (_, _, t, r) in enumerate(candidates):
        add_row([(m0 + r, 1.0), (j, -t)], 0.0, np.inf)
    # Two families of valid cuts that tighten the relaxation a lot: a round's makespan is at least
    # its groups' rank-weighted mean time (the degrees of a used round sum to N), and at least the
    # fastest time of any group holding a sample the round runs.
    for r in range(max_rounds):
        entries = [(j, -cand[1] * cand[2] / n_ranks) for j, cand in enumerate(candidates) if cand[3] == r]
        add_row(entries + [(m0 + r, 1.0)], 0.0, np.inf)
    for i in range(n):
        alone = min(cand[2] for cand in candidates if cand[0] >> i & 1)
        for r in range(max_rounds):
            entries = [(j, -alone) for j, cand in enumerate(candidates) if cand[3] == r and cand[0] >> i & 1]
            if entries:
                add_row(entries + [(m0 + r, 1.0)], 0.0, np.inf)

    matrix = coo_matrix((vals, (rows, cols)), shape=(len(lower), n_vars)).tocsr()
    objective = np.zeros(n_vars)
    objective[m0:u0] = 1.0
    integrality = np.ones(n_vars)
    integrality[m0:u0] = 0
    upper_bounds = np.ones(n_vars)
    upper_bounds[m0:u0] = np.inf
    return milp(
        objective,
        integrality=integrality,
        bounds=Bounds(np.zeros(n_vars), upper_bounds),
        constraints=LinearConstraint(matrix, np.array(lower), np.array(upper)),
        options={"time_limit": time_limit_s, "mip_rel_gap": 1e-7, "disp": False},
    )


def _plan(chosen: list[tuple[int, int, int]], timer: GroupTimer, workloads: dict, members: dict,
          config: SolverConfig, elapsed_ms: float) -> Plan:
    """Places the chosen (round, subset mask, degree) groups like the planner does."""
    rounds = []
    for r in sorted({c[0] for c in chosen}):
        picked = [(u, d) for rr, u, d in chosen if rr == r]
        placement = place_groups([d for _, d in picked], config.num_ranks, config.ranks_per_node)
        groups = sorted(
            (GroupPlan(tuple(range(start, start + d)), d, timer.algo(workloads[u], d), members[u],
                       timer.time(workloads[u], d))
             for (u, d), start in zip(picked, placement.starts)),
            key=lambda g: g.ranks[0],
        )
        rounds.append(RoundPlan(tuple(groups), max(g.predicted_ms for g in groups)))
    return Plan(tuple(rounds), float(sum(r.predicted_ms for r in rounds)), 0.0, elapsed_ms, config.num_ranks,
                extras={"ranks_per_node": config.ranks_per_node})
