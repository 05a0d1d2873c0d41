"""Polish of one round of a large batch: small changes between its slowest group and fast ones.

The round's groups keep their optimal degrees; one step takes the change that shortens the round
most -- a short sample of the slowest group moves to one of the fastest groups, or swaps with one of
their short samples (a fine step when the groups are already well balanced) -- and stops when none
does, or when what the steps left could save is below the limits' `polish_min_gain` share of the
round (each step relieves the slowest group, so with k steps left the k + 1-th slowest group bounds
the round, unless a fast group that takes a sample becomes that slow). All candidate changes of a
step are timed in one cost-model query, from the groups' workloads adjusted by the samples that
leave and join.
"""
from __future__ import annotations

import numpy as np

from mindspeed_mm.core.fcp.solver.degree_dp import realise
from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver
from mindspeed_mm.core.fcp.solver.round_types import GroupChoice, RoundChoice, RoundStart

# A change must shorten the round by more than this fraction to count as an improvement.
_IMPROVEMENT_RTOL = 1e-9


def polish_round(solver: RoundSolver, start: RoundStart, moves: int) -> RoundChoice:
    """The start with its optimal degrees, improved by at most `moves` changes (`_best_change`,
    candidates bounded by the solver's `max_targets` and `max_movers`)."""
    grouping = start.grouping()
    spare = solver.num_ranks - int(start.min_degrees.sum())
    extra = realise(start.times, spare, start.makespan)
    rows = np.arange(len(grouping))
    members = [list(g) for g in grouping]
    degrees = (start.min_degrees + extra).tolist()
    times = start.times[rows, extra].tolist()
    algos = start.algos[rows, extra].tolist()
    changed: set[int] = set()
    for left in range(moves, 0, -1):
        change = _best_change(solver, members, degrees, times, left)
        if change is None:
            break
        slow, target, out_of_slow, out_of_target, slow_time, target_time, slow_algo, target_algo = change
        members[slow].remove(out_of_slow)
        members[target].append(out_of_slow)
        if out_of_target >= 0:
            members[target].remove(out_of_target)
            members[slow].append(out_of_target)
        times[slow], times[target] = slow_time, target_time
        algos[slow], algos[target] = slow_algo, target_algo
        changed.update((slow, target))
    names = solver.timer.cost.algos
    # The start's groups come as ascending tuples; only the changed ones need sorting again.
    samples = [tuple(sorted(members[k])) if k in changed else g for k, g in enumerate(grouping)]
    chosen = [GroupChoice(s, d, names[a], t) for s, d, a, t in zip(samples, degrees, algos, times)]
    return RoundChoice(tuple(sorted(chosen, key=lambda c: c.samples)), max(times))


def _best_change(
    solver: RoundSolver, members: list[list[int]], degrees: list[int], times: list[float], moves_left: int
) -> tuple[int, int, int, int, float, float, int, int] | None:
    """The change that shortens the round most, degrees kept: one sample (among the `max_movers`
    shortest) of the slowest group moves to one of the `max_targets` fastest groups, or swaps with one
    of that group's `max_movers` shortest samples. Returns (slowest group, target group, sample out of
    the slowest, sample out of the target (-1: none), their new times and algos); None when no change
    shortens the round, or when the `moves_left` slowest groups are all within `polish_min_gain` of the
    next one (each step relieves one slowest group, so the steps left could gain about that much)."""
    limits = solver.limits
    order = sorted(range(len(times)), key=lambda k: (-times[k], k))
    slow = order[0]
    targets = order[:0:-1][: limits.max_targets]
    if len(members[slow]) < 2 or not targets:
        return None
    if times[slow] - times[order[min(moves_left, len(order) - 1)]] <= limits.polish_min_gain * times[slow]:
        return None
    # The slowest of the other groups bounds the round whatever the change.
    rest = {t: next((times[k] for k in order[1:] if k != t), 0.0) for t in targets}
    if min(rest.values()) >= times[slow] * (1 - _IMPROVEMENT_RTOL):
        return None

    def shortest(k: int) -> list[int]:
        return sorted(members[k], key=lambda i: (solver.lengths[i], i))[: limits.max_movers]

    # Changes (target, sample out of the slowest, sample out of the target or -1 for a plain move).
    changes = [(t, i, j) for t in targets for i in shortest(slow) for j in [-1, *shortest(t)]]
    picked = [slow, *targets]
    position = {k: p for p, k in enumerate(picked)}
    # Rows 2c and 2c + 1: the slowest group and the target after change c.
    rows = np.array([position[k] for t, _, _ in changes for k in (slow, t)], dtype=np.int64)
    out_in = np.array([(i, j, j, i) for _, i, j in changes], dtype=np.int64).reshape(-1, 2)
    workloads = solver.facts.workloads.exchanged([members[k] for k in picked], rows, out_in[:, 0], out_in[:, 1])
    firsts = [degrees[k] for t, _, _ in changes for k in (slow, t)]
    new, new_algos = solver.timer.evaluate(workloads, firsts, solver.top_degree, 1)
    new = new[:, 0].reshape(-1, 2)
    new_algos = new_algos[:, 0].reshape(-1, 2)
    values = np.maximum(new.max(axis=1), [rest[t] for t, _, _ in changes])
    best = int(np.argmin(values))
    if not values[best] < times[slow] * (1 - _IMPROVEMENT_RTOL):
        return None
    target, i, j = changes[best]
    return (slow, target, i, j, float(new[best, 0]), float(new[best, 1]), int(new_algos[best, 0]),
            int(new_algos[best, 1]))
