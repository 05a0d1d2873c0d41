"""The lean search of large batches (`lean_rounds`): whole-step starts of one group size for the
fewest rounds and then one more round at a time (`step_layout`), in the order of their step estimates."""
from __future__ import annotations

from typing import Callable

from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver
from mindspeed_mm.core.fcp.solver.round_types import RoundStart, SampleFacts
from mindspeed_mm.core.fcp.solver.rounds import no_plan, round_counts, round_limit, spread_over_rounds
from mindspeed_mm.core.fcp.solver.step_layout import joint_starts, step_estimates
from mindspeed_mm.core.fcp.solver.step_time import RoundFloor

# Round counts tried beyond the memory bound at most, and the plan / lower bound ratio below which the
# local search is skipped.
EXTRA_ROUNDS = 2
GOOD_ENOUGH = 1.01
# Share of the memory of the previous round count's ranks above which one more round is always tried.
TIGHT_MEMORY = 0.75


def lean_rounds(
    solver: RoundSolver,
    facts: SampleFacts,
    lengths: list[int],
    n_ranks: int,
    capacity: int,
    max_rounds: int | None,
    lower_bound: float,
    floor: RoundFloor = RoundFloor(),
) -> tuple[list[tuple[float, list[RoundStart]]], int]:
    """Lean search for large batches. For the fewest rounds, every group size in the order of its
    step estimate, stopping once the estimate is no better than a plan found: the joint start of all
    rounds (else the LPT spread with one uniform start per round), and the same with its own groups
    closed to the other samples (`joint_starts(closed=True)`). Then one more round at a time with
    the winning size, while that does better and its estimate, scaled as the winner's plan is to its
    estimate, promises better (or memory was tight with one round less). Totals count each round as
    `floor` lengthens it. Returns every (total, starts) found, the fastest first (ties: the first found),
    and the polish moves for their rounds (`polish_round`): none when the winner is already within
    `GOOD_ENOUGH` of the bound."""
    tried = round_counts(lengths, n_ranks, capacity, max_rounds, EXTRA_ROUNDS)
    limit = round_limit(lengths, max_rounds)
    min_samples = -(-n_ranks // solver.top_degree)
    usable = [d for d in solver.limits.uniform_degrees if d <= solver.top_degree]
    best: tuple[float, list[RoundStart]] | None = None
    found: list[tuple[float, list[RoundStart]]] = []
    best_size = 0
    best_closed = False
    size_kinds: dict[int, set[bool]] = {}   # per size, the kinds that gave a start this round count
    # Later round counts: estimates scaled by the winner's plan / estimate ratio.
    calibration = 1.0
    count = tried[0]
    while count <= limit and (count <= tried[-1] or best is None):
        later = best_size > 0   # a later round count: the winning size only
        sizes = [best_size] if later else usable
        # The kinds (closed or not) of the winning size that gave a start the round count before and lost.
        lost_kinds = size_kinds.get(best_size, set()) - {best_closed}
        size_kinds = {}
        estimates = step_estimates(solver, count, sizes)
        # The memory-free estimates miss what one more round gains when memory is tight.
        tight = sum(lengths) > TIGHT_MEMORY * (count - 1) * n_ranks * capacity
        scale = 1.0 if best is None or tight else calibration
        improved = False
        spread: list[list[int]] | None = None
        for estimate, size in sorted(zip(estimates, sizes)):
            if best is not None and max(estimate * scale, count * floor.traffic_ms) >= best[0]:
                break
            # The size open to every sample, and again with its samples' own groups closed to the others
            # (None where they hold few ranks). With one more round, the winner's kind goes first; the
            # other, if it gave a start that lost the round count before, only when that one wins.
            kinds = (best_closed, not best_closed) if later else (False, True)
            for k, closed in enumerate(kinds):
                if k and later and not improved and closed in lost_kinds:
                    break
                starts = joint_starts(solver, count, size, closed=closed)
                if starts is None and not closed:
                    if spread is None:
                        spread = spread_over_rounds(facts.device_ms, lengths, count, n_ranks * capacity,
                                                    min_samples) or []
                    starts = per_round(spread, lambda samples: solver.uniform_start(samples, size))
                if starts is None:
                    continue
                rounds_ms = sum(start.makespan for start in starts)
                total = sum(floor.round_ms(start.makespan) for start in starts)
                found.append((total, starts))
                if best is None or total < best[0]:
                    best, best_size, best_closed, improved = (total, starts), size, closed, True
                    calibration = rounds_ms / estimate if estimate > 0 else 1.0
                size_kinds.setdefault(size, set()).add(closed)
        if best is None:
            # No uniform start fits: the other start groupings, per round of the LPT spread.
            spread = spread_over_rounds(facts.device_ms, lengths, count, n_ranks * capacity, min_samples) or []
            starts = per_round(spread, solver.start)
            if starts is not None:
                best, improved = (sum(floor.round_ms(start.makespan) for start in starts), starts), True
                found.append(best)
        if best is not None and not improved:
            break
        count += 1
    if best is None:
        raise no_plan(solver, lengths, n_ranks, capacity, max_rounds)
    moves = solver.limits.max_moves if best[0] > GOOD_ENOUGH * lower_bound else 0
    return sorted(found, key=lambda candidate: candidate[0]), moves


def per_round(spread: list[list[int]], start: Callable[[list[int]], RoundStart | None]) -> list[RoundStart] | None:
    """The start of every round of a spread, None when the spread is empty or a round has none."""
    starts = []
    for samples in spread:
        found = start(samples)
        if found is None:
            return None
        starts.append(found)
    return starts or None
