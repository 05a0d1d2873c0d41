"""Moves of samples between rounds, for the thorough search of small problems.

The round spreads (longest first, or anchored on the heaviest samples) fix which samples share a
round before the rounds are solved; the worst gaps to the exact optimum come from that choice (a
long sample whose round could have taken more short ones beside it while a later round ran nearly
empty). This pass moves one sample to another round, or swaps two samples of two rounds, re-solves
the two rounds and keeps the change when the step gets shorter, until no change helps or the budget
of re-solved rounds is spent (distinct sample sets solved: a count, so the result is deterministic).
"""
from __future__ import annotations

from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver
from mindspeed_mm.core.fcp.solver.round_types import RoundChoice

_RTOL = 1e-9


def exchange_between_rounds(solver: RoundSolver, rounds: list[RoundChoice], budget: int) -> list[RoundChoice]:
    """`rounds` improved by sample moves and swaps between pairs of rounds (see the module docstring)."""
    members = [sorted(i for g in r.groups for i in g.samples) for r in rounds]
    current = list(rounds)
    spent = 0
    solved: dict[tuple[int, ...], RoundChoice | None] = {}

    def solve(samples: list[int]) -> RoundChoice | None:
        nonlocal spent
        key = tuple(sorted(samples))
        if key not in solved:
            spent += 1
            solved[key] = solver.solve(list(key))
        return solved[key]

    improved = True
    while improved and spent < budget:
        improved = False
        for a in range(len(current)):
            for b in range(len(current)):
                if a == b:
                    continue
                for i in list(members[a]):
                    options = [None] + ([j for j in members[b]] if a < b else [])
                    for j in options:
                        left = [x for x in members[a] if x != i] + ([] if j is None else [j])
                        if not left:
                            continue
                        right = [x for x in members[b] if x != j] + [i]
                        first, second = solve(left), solve(right)
                        if first is None or second is None:
                            continue
                        before = current[a].makespan + current[b].makespan
                        if first.makespan + second.makespan < before * (1 - _RTOL):
                            current[a], current[b] = first, second
                            members[a], members[b] = sorted(left), sorted(right)
                            improved = True
                            break
                        if spent >= budget:
                            return current
                    if improved:
                        break
                if improved:
                    break
            if improved:
                break
    return current
