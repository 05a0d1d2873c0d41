"""Plan-aware sampler: the global batch of each step, and the samples of a rank's round."""
from __future__ import annotations

from typing import Protocol

import numpy as np

from mindspeed_mm.core.fcp.sandbox.text_dataset import Sample
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRound
from mindspeed_mm.core.fcp.solver import InvalidPlanError


class PlanDataset(Protocol):
    """What the sampler needs of a dataset: metadata for the planner, samples by index."""

    @property
    def lengths(self) -> np.ndarray:
        """LLM tokens of every sample."""
        ...

    @property
    def loss_tokens(self) -> np.ndarray:
        """Tokens of every sample that count in the loss."""
        ...

    @property
    def vision_patches(self) -> np.ndarray | None:
        """Vision-encoder patches of every sample; None for a text-only dataset."""
        ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Sample: ...


class PlanAwareSampler:
    """Global batches of consecutive samples; a plan maps each rank to its group's samples per round.

    Step `s` (zero-based) trains dataset samples `s * global_batch_size ...` and the planner sees only
    their lengths; a rank then loads just the samples of its groups.
    """

    def __init__(self, dataset: PlanDataset, global_batch_size: int, num_steps: int) -> None:
        if global_batch_size <= 0 or num_steps <= 0:
            raise ValueError(f"global_batch_size and num_steps must be positive, got {global_batch_size}, {num_steps}")
        if len(dataset) < global_batch_size * num_steps:
            raise ValueError(
                f"dataset holds {len(dataset)} samples, fewer than {num_steps} steps x {global_batch_size} per batch"
            )
        self.dataset = dataset
        self.global_batch_size = global_batch_size
        self.num_steps = num_steps

    def batch_indices(self, step: int) -> range:
        """Dataset indices of step `step`'s global batch."""
        if not 0 <= step < self.num_steps:
            raise ValueError(f"step {step} is outside 0..{self.num_steps - 1}")
        start = step * self.global_batch_size
        return range(start, start + self.global_batch_size)

    def batch_lengths(self, step: int) -> np.ndarray:
        """Token lengths of the global batch (metadata only, nothing is loaded)."""
        indices = self.batch_indices(step)
        return self.dataset.lengths[indices.start : indices.stop]

    def batch_patches(self, step: int) -> np.ndarray | None:
        """Vision-encoder patches of the global batch's samples (metadata); None without a vision encoder."""
        patches = self.dataset.vision_patches
        if patches is None:
            return None
        indices = self.batch_indices(step)
        return patches[indices.start : indices.stop]

    def batch_loss_tokens(self, step: int) -> int:
        """Tokens of the global batch that count in the loss: the loss normaliser of the step."""
        indices = self.batch_indices(step)
        return int(self.dataset.loss_tokens[indices.start : indices.stop].sum())

    def round_sample_indices(self, step: int, fcp_round: FCPRound) -> tuple[int, ...]:
        """Dataset indices of the samples of `fcp_round` (a round of step `step`'s plan), in packing order."""
        indices = self.batch_indices(step)
        for position in fcp_round.batch_positions:
            if not 0 <= position < len(indices):
                raise InvalidPlanError(
                    f"step {step + 1}, round {fcp_round.round_index}: sample {position} is outside the global batch "
                    f"of {len(indices)}"
                )
        return tuple(indices[p] for p in fcp_round.batch_positions)

    def load(self, sample_indices: tuple[int, ...]) -> list[Sample]:
        """The samples at `sample_indices`, loaded now."""
        return [self.dataset[i] for i in sample_indices]
