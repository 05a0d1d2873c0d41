"""Step-by-step record of a training run, as written to `result.json` (see `run_outputs`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class StepRecord:
    """One training step as seen by all ranks together."""

    iteration: int
    """One-based step number."""
    loss: float
    """Sum of the token losses of the global batch / its loss tokens."""
    sample_indices: list[int]
    """Dataset indices of the global batch."""
    lengths: list[int]
    """Token length of each sample of the batch."""
    tokens_trained: list[int]
    """Tokens of each sample fed to the model, summed over all ranks' shards."""
    loss_tokens_trained: list[int]
    """Tokens of each sample whose loss was counted, summed over all ranks."""
    groups_trained: list[int]
    """Number of groups that trained each sample."""
    plan_digest: str
    """sha256 of the step's plan layout."""
    round_degrees: list[list[int]]
    """Degrees of the groups of each round."""
    predicted_round_ms: list[float]
    """Planner's predicted time of each round."""
    measured_round_ms: list[float]
    """Slowest rank's forward + backward time in each round."""
    timings_ms: dict[str, float]
    """Mean over ranks, in ms: `plan_wait_ms` (training thread blocked on the plan), `plan_check_ms` (digest
    all-gather, which also waits for the last rank to start the step, plan validation, creation of new
    groups), `forward_backward_ms` (all rounds), `grad_sync_ms` (the gradient all-reduce, including waiting
    for the slowest rank), `optimizer_ms` and `step_ms` (the whole step)."""
    predicted_group_ms: list[list[float]] = field(default_factory=list)
    """Planner's predicted time of each group of each round (with the correction factors of `corrections`)."""
    measured_group_ms: list[list[float]] = field(default_factory=list)
    """Measured time of each group of each round: the smallest of its ranks' times in the round."""
    corrections: dict[str, Any] | None = None
    """Correction factors (`CorrectionTable.to_json()`) the step was planned with; None without recalibration."""
    vision_patches_trained: list[int] = field(default_factory=list)
    """Vision-encoder patches of each sample encoded, summed over all ranks (empty for a text-only model)."""
    vision_patches_per_rank: list[int] = field(default_factory=list)
    """Vision-encoder patches each rank encoded in the step (empty for a text-only model)."""
    grad_sync_ms_per_rank: list[float] = field(default_factory=list)
    """Each rank's `grad_sync_ms`. The smallest is the last rank to reach the all-reduce: its time is the
    reduction itself, without waiting for a slower rank (empty for the single-process reference)."""


@dataclass
class TrainResult:
    """What a run did, step by step."""

    context_parallel_algo: str
    """`fcp_cp_algo`, `megatron_cp_algo`, or `reference` for the single-process reference."""
    world_size: int
    """Number of ranks."""
    async_planning: bool
    """Whether plans were computed one step ahead in a background thread."""
    steps: list[StepRecord] = field(default_factory=list)
    """One record per step."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    def mean_timings_ms(self, skip_first: int = 1) -> dict[str, float]:
        """Mean step-time split over the steps after the first `skip_first` (warm-up)."""
        steps = self.steps[skip_first:] or self.steps
        return {k: float(np.mean([s.timings_ms[k] for s in steps])) for k in steps[0].timings_ms}


def final_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of every parameter."""
    return {name: p.detach().to("cpu").clone() for name, p in model.named_parameters()}
