"""Hand-written plans for the tests of the runtime, the patches and the data path."""
from __future__ import annotations

from mindspeed_mm.core.fcp.solver import GroupPlan, Plan, RoundPlan


def make_plan(rounds: list[list[tuple[tuple[int, ...], str, tuple[int, ...]]]], num_ranks: int) -> Plan:
    """A plan from (ranks, algo, sample positions) per group per round; predicted times are dummies."""
    return Plan(
        rounds=tuple(
            RoundPlan(
                groups=tuple(
                    GroupPlan(ranks=r, degree=len(r), algo=a, samples=s, predicted_ms=1.0) for r, a, s in groups
                ),
                predicted_ms=1.0,
            )
            for groups in rounds
        ),
        predicted_ms=float(len(rounds)),
        lower_bound_ms=1.0,
        solver_ms=0.0,
        num_ranks=num_ranks,
    )
