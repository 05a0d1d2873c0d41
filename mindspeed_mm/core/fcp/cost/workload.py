"""Additive summary of a packed batch, the only thing the time model needs to know about it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupWorkload:
    """Additive aggregates of a packed batch: merging two batches is the field-wise sum."""

    total_tokens: int
    """Sum of the sample lengths (LLM tokens)."""
    num_docs: int
    """Number of documents (samples) in the batch."""
    sum_sq_tokens: int = 0
    """Sum of squared sample lengths: the quadratic attention term."""
    vision_patches: int = 0
    """Vision-encoder patches of the batch (before the spatial merge)."""

    def __add__(self, other: "GroupWorkload") -> "GroupWorkload":
        if not isinstance(other, GroupWorkload):
            return NotImplemented
        return GroupWorkload(self.total_tokens + other.total_tokens, self.num_docs + other.num_docs,
                             self.sum_sq_tokens + other.sum_sq_tokens,
                             self.vision_patches + other.vision_patches)

    @classmethod
    def empty(cls) -> "GroupWorkload":
        """The workload of an empty batch (neutral element of `+`)."""
        return cls(0, 0, 0, 0)
