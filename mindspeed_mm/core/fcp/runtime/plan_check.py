"""Checks, before a step runs, that every rank holds the same executable plan."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver import InvalidPlanError, Plan, validate_plan

_DIGEST_BYTES = 32


class PlanMismatchError(RuntimeError):
    """Ranks computed different plans for the same step."""


def check_plan_agreement(
    plan: Plan, step: int, group: dist.ProcessGroup | None = None, device: torch.device | None = None
) -> None:
    """All-gathers the plan digest; raises `PlanMismatchError` naming the step and the disagreeing ranks.

    Every rank raises the same error, so a mismatch stops training instead of leaving ranks waiting
    in different communication groups. `device` is where the backend communicates (default: CPU).
    """
    mine = torch.frombuffer(bytearray(bytes.fromhex(plan.digest())), dtype=torch.uint8).to(device or "cpu")
    if mine.numel() != _DIGEST_BYTES:
        raise ValueError(f"plan digest must be {_DIGEST_BYTES} bytes of sha256, got {mine.numel()}")
    world = dist.get_world_size(group)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    digests = [bytes(t.cpu().tolist()).hex() for t in gathered]
    if len(set(digests)) > 1:
        differing = [r for r, d in enumerate(digests) if d != digests[0]]
        raise PlanMismatchError(
            f"step {step + 1}: ranks hold different plans (rank 0 digest {digests[0][:12]}, ranks {differing} differ: "
            + ", ".join(f"rank {r} {digests[r][:12]}" for r in differing)
            + ")"
        )


def check_plan_executable(
    plan: Plan,
    step: int,
    num_ranks: int,
    lengths: Sequence[int],
    cost: CostModel,
    patches: Sequence[int] | None = None,
) -> None:
    """Raises `InvalidPlanError` naming the step unless `plan` covers all `num_ranks` ranks in every
    round, places every sample of the batch exactly once and fits the cost model's limits."""
    if plan.num_ranks != num_ranks:
        raise InvalidPlanError(f"step {step + 1}: plan covers {plan.num_ranks} ranks but training runs on {num_ranks}")
    try:
        validate_plan(plan, lengths, cost, patches)
    except InvalidPlanError as err:
        raise InvalidPlanError(f"step {step + 1}: {err}") from None
