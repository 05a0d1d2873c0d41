"""Step time of a plan: its rounds plus the step's own costs (`StepFigures` of the cost model).

Two ways of running the same plan (see `tuned_static` for the layouts that use each):
- lockstep rounds with FSDP: every round all-gathers the parameters and reduce-scatters the gradients
  over all ranks; the traffic overlaps the round's compute (`fsdp_overlap` of the shorter of the two),
  so a round lasts at least `fsdp_round_ms` (`StepFigures.lockstep_round_ms`);
- replicas that meet once per step (DDP / distributed optimizer): nothing spans all ranks before the
  gradient reduction, so a group starts as soon as its own members are done with their previous
  groups (`dataflow_ms`; for independent static replicas, the busiest replica), plus one
  `replica_reduction_ms`.
Both add the optimizer step. A cost model without step figures prices the rounds only.
"""
from __future__ import annotations

from dataclasses import dataclass

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.table import StepFigures
from mindspeed_mm.core.fcp.solver.plan import INDEPENDENT, LOCKSTEP, Plan

__all__ = ["INDEPENDENT", "LOCKSTEP", "RoundFloor", "dataflow_ms", "fsdp_step_ms", "replicas_step_ms",
           "round_floor", "step_lower_bound_ms", "step_ms"]


@dataclass(frozen=True)
class RoundFloor:
    """What the planner counts for a round of a given pass: the pass itself, or under FSDP the lockstep round."""

    step: StepFigures | None = None
    """The step figures whose FSDP traffic lengthens every round (None: rounds last their pass)."""
    per_round_ms: float = 0.0
    """Work every round adds to its slowest group's pass, whatever its samples: the search of rounds that spread
    their media over all their ranks counts each round's encoder call floor here (`vision_phases`)."""

    @property
    def traffic_ms(self) -> float:
        """The least any round lasts."""
        return self.round_ms(0.0)

    def round_ms(self, pass_ms: float) -> float:
        """Length of a round whose slowest group's pass lasts `pass_ms`."""
        pass_ms += self.per_round_ms
        return pass_ms if self.step is None else self.step.lockstep_round_ms(pass_ms)


def round_floor(cost: CostModel, semantics: str) -> RoundFloor:
    """The rounds' floor under `semantics`: FSDP's traffic in lockstep rounds, none for replicas."""
    return RoundFloor(cost.step if semantics == LOCKSTEP else None)


def fsdp_step_ms(plan: Plan, cost: CostModel) -> float:
    """Step time of `plan` in lockstep rounds under FSDP."""
    step = cost.step
    if step is None:
        return plan.predicted_ms
    return sum(step.lockstep_round_ms(r.predicted_ms) for r in plan.rounds) + step.optimizer_ms


def dataflow_ms(plan: Plan) -> float:
    """Forward + backward time of `plan` when each group waits only for its own members: a group of round r
    starts when the last of its ranks has finished its group of round r - 1."""
    free = [0.0] * plan.num_ranks
    for round_plan in plan.rounds:
        for group in round_plan.groups:
            end = max(free[rank] for rank in group.ranks) + group.predicted_ms
            for rank in group.ranks:
                free[rank] = end
    return max(free)


def replicas_step_ms(rounds_ms: float, cost: CostModel) -> float:
    """Step time of replicas whose forward + backward work lasts `rounds_ms` and that reduce once per step."""
    step = cost.step
    if step is None:
        return rounds_ms
    return rounds_ms + step.replica_reduction_ms + step.optimizer_ms


def step_ms(plan: Plan, cost: CostModel, semantics: str) -> float:
    """Step time of `plan` under `semantics`: lockstep FSDP rounds, or (INDEPENDENT) groups that wait
    only for their own members, then one gradient reduction."""
    if semantics == LOCKSTEP:
        return fsdp_step_ms(plan, cost)
    if semantics == INDEPENDENT:
        return replicas_step_ms(dataflow_ms(plan), cost)
    raise ValueError(f"semantics must be {LOCKSTEP!r} or {INDEPENDENT!r}, got {semantics!r}")


def step_lower_bound_ms(rounds_bound_ms: float, cost: CostModel, semantics: str) -> float:
    """A lower bound on the step time under `semantics` from a lower bound on its forward + backward work:
    at least one lockstep round of that work (LOCKSTEP: more rounds only last longer), or the once-per-step
    reduction (INDEPENDENT), plus the optimizer step."""
    step = cost.step
    if step is None:
        return rounds_bound_ms
    if semantics == LOCKSTEP:
        return step.lockstep_round_ms(rounds_bound_ms) + step.optimizer_ms
    if semantics == INDEPENDENT:
        return rounds_bound_ms + step.replica_reduction_ms + step.optimizer_ms
    raise ValueError(f"semantics must be {LOCKSTEP!r} or {INDEPENDENT!r}, got {semantics!r}")
