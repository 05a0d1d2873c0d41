"""Additive summary of a packed batch, the only thing the time model needs to know about it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


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


@dataclass(frozen=True)
class WorkloadColumns:
    """The aggregates of K workloads as float64 columns of shape [K, 1], for vectorised time queries
    (a column broadcasts against a [K, W] matrix of degrees)."""

    total_tokens: np.ndarray
    """LLM tokens of each workload."""
    num_docs: np.ndarray
    """Documents of each workload."""
    sum_sq_tokens: np.ndarray
    """Sum of squared document lengths of each workload."""
    vision_patches: np.ndarray
    """Vision-encoder patches of each workload."""

    @classmethod
    def stack(cls, workloads: Sequence[GroupWorkload]) -> "WorkloadColumns":
        """Columns of these workloads, in order."""
        rows = np.array([(w.total_tokens, w.num_docs, w.sum_sq_tokens, w.vision_patches) for w in workloads],
                        dtype=np.float64).reshape(len(workloads), 4)
        return cls(rows[:, 0:1], rows[:, 1:2], rows[:, 2:3], rows[:, 3:4])
