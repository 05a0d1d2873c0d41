"""Exact reference: the planning problem as a mixed-integer program, for small batches.

Same problem and constraints as `plan_batch`: every sample in exactly one group; a group of samples S
runs on d ranks with min_degree(S) <= d <= max_degree at its best algo's time T(S, d) (finite); in
every round the degrees sum to exactly N; the step time is the sum of the round makespans. Contiguous
node-aware placement never changes a predicted time, so it is applied afterwards, as in the planner.

Set partitioning over candidates (S, d, r): x[S, d, r] = 1 when round r has a group running S on d
ranks. Rounds are symmetric, so rounds are ordered by their smallest sample index (a candidate may
only use a round r <= min(S)), and round r is used only if round r - 1 is. Variables M_r >= T(S, d)
x[S, d, r] carry the makespans. An optional known step time (e.g. the heuristic's) prunes candidates
slower than it and caps the number of rounds. Solved with scipy's HiGHS `milp`.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from functools import reduce
from operator import add
from typing import TYPE_CHECKING, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from mindspeed_mm.core.fcp.solver.group_times import GroupTimer
from mindspeed_mm.core.fcp.solver.placement import place_groups
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, Plan, RoundPlan, SolverConfig

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
    num_candidates: int
    """Binary (group, degree, round) candidates in the model."""
    plan: Plan | None
    """The best plan found, placed on ranks like the planner's (None when infeasible)."""


def solve_exact(
    lengths: Sequence[int],
    cost: "CostModel",
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    time_limit_s: float = 60.0,
    known_step_ms: float | None = None,
) -> ExactResult:
    """Optimal plan of a small batch (at most `MAX_EXACT_SAMPLES` samples).

    `known_step_ms`, the step time of any feasible plan, only speeds the solve up: candidates slower
    than it and rounds beyond what it allows are left out, which cannot cut off a better plan.
    """
    started = time.perf_counter()
    n = len(lengths)
    if not 1 <= n <= MAX_EXACT_SAMPLES:
        raise ValueError(f"the exact model takes 1..{MAX_EXACT_SAMPLES} samples, got {n}")
    if any(int(x) <= 0 for x in lengths):
        bad = next(i for i, x in enumerate(lengths) if int(x) <= 0)
        raise ValueError(f"sample {bad}: length must be a positive integer, got {lengths[bad]!r}")
    n_ranks, max_degree = config.num_ranks, config.degree_limit
    timer = GroupTimer(cost, max_degree)
    singles = [cost.workload([int(lengths[i])], None if patches is None else [int(patches[i])]) for i in range(n)]

    subsets = [s for size in range(1, n + 1) for s in itertools.combinations(range(n), size)]
    tokens = {s: sum(int(lengths[i]) for i in s) for s in subsets}
    workloads = {s: reduce(add, (singles[i] for i in s)) for s in subsets}
    feasible_subsets = [s for s in subsets if cost.min_degree(tokens[s]) <= min(max_degree, n_ranks)]
    timer.prepare([(workloads[s], cost.min_degree(tokens[s]), max_degree) for s in feasible_subsets])

    cap = math.inf if known_step_ms is None else known_step_ms * (1 + _PRUNE_RTOL)
    groups: list[tuple[tuple[int, ...], int, float]] = []
    for s in feasible_subsets:
        lo = cost.min_degree(tokens[s])
        times = timer.window(workloads[s], lo, max_degree)
        for d in range(lo, min(max_degree, n_ranks) + 1):
            t = float(times[d - lo])
            if math.isfinite(t) and t <= cap:
                groups.append((s, d, t))
    fastest = min((t for _, _, t in groups), default=math.inf)
    max_rounds = n if config.max_rounds is None else min(n, config.max_rounds)
    if math.isfinite(cap) and fastest > 0:
        max_rounds = min(max_rounds, int(cap // fastest))
    candidates = [(s, d, t, r) for s, d, t in groups for r in range(min(s[0] + 1, max_rounds))]
    if not candidates or max_rounds < 1:
        return ExactResult("infeasible", math.inf, math.inf, (time.perf_counter() - started) * 1e3, 0, None)

    result = _solve(candidates, n, n_ranks, max_rounds, time_limit_s)
    elapsed = (time.perf_counter() - started) * 1e3
    if result.x is None:
        status = "infeasible" if result.status == 2 else "time_limit"
        return ExactResult(status, math.inf, math.inf if status == "infeasible" else float(result.mip_dual_bound),
                           elapsed, len(candidates), None)
    chosen = [candidates[j] for j in np.flatnonzero(result.x[: len(candidates)] > 0.5)]
    plan = _plan(chosen, timer, workloads, cost, config, elapsed)
    status = "optimal" if result.status == 0 else "time_limit"
    bound = plan.predicted_ms if status == "optimal" else float(result.mip_dual_bound)
    return ExactResult(status, plan.predicted_ms, bound, elapsed, len(candidates), plan)


def _solve(candidates: list, n: int, n_ranks: int, max_rounds: int, time_limit_s: float):
    """Builds and solves the MILP; variables: x (candidates), M (makespans), u (round used)."""
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
        add_row([(j, 1.0) for j, cand in enumerate(candidates) if i in cand[0]], 1.0, 1.0)
    for r in range(max_rounds):
        entries = [(j, float(cand[1])) for j, cand in enumerate(candidates) if cand[3] == r]
        add_row(entries + [(u0 + r, -float(n_ranks))], 0.0, 0.0)
        if r > 0:
            add_row([(u0 + r - 1, 1.0), (u0 + r, -1.0)], 0.0, np.inf)
    for j, (_, _, t, r) in enumerate(candidates):
        add_row([(m0 + r, 1.0), (j, -t)], 0.0, np.inf)

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


def _plan(chosen: list, timer: GroupTimer, workloads: dict, cost: "CostModel", config: SolverConfig,
          elapsed_ms: float) -> Plan:
    rounds = []
    for r in sorted({cand[3] for cand in chosen}):
        members = [cand for cand in chosen if cand[3] == r]
        placement = place_groups([d for _, d, _, _ in members], config.num_ranks, config.ranks_per_node)
        groups = sorted(
            (GroupPlan(tuple(range(start, start + d)), d, timer.algo(workloads[s], d), s, timer.time(workloads[s], d))
             for (s, d, _, _), start in zip(members, placement.starts)),
            key=lambda g: g.ranks[0],
        )
        rounds.append(RoundPlan(tuple(groups), max(g.predicted_ms for g in groups)))
    return Plan(tuple(rounds), float(sum(r.predicted_ms for r in rounds)), 0.0, elapsed_ms, config.num_ranks)
