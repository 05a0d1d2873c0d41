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
    """The aggregates of K workloads as one float64 matrix, for vectorised time queries.

    Each aggregate is read as a [K, 1] column, which broadcasts against a [K, W] matrix of degrees.
    Float64 holds every aggregate exactly below 2**53.
    """

    values: np.ndarray
    """[K, 4]: total_tokens, num_docs, sum_sq_tokens, vision_patches of each workload."""

    @classmethod
    def stack(cls, workloads: Sequence[GroupWorkload]) -> "WorkloadColumns":
        """Columns of these workloads, in order."""
        rows = np.array([(w.total_tokens, w.num_docs, w.sum_sq_tokens, w.vision_patches) for w in workloads],
                        dtype=np.float64).reshape(len(workloads), 4)
        return cls(rows)

    def __len__(self) -> int:
        return self.values.shape[0]

    @property
    def total_tokens(self) -> np.ndarray:
        """[K, 1] LLM tokens."""
        return self.values[:, 0:1]

    @property
    def num_docs(self) -> np.ndarray:
        """[K, 1] documents."""
        return self.values[:, 1:2]

    @property
    def sum_sq_tokens(self) -> np.ndarray:
        """[K, 1] sums of squared document lengths."""
        return self.values[:, 2:3]

    @property
    def vision_patches(self) -> np.ndarray:
        """[K, 1] vision-encoder patches."""
        return self.values[:, 3:4]

    def group_sums(self, members: np.ndarray, owners: np.ndarray, groups: int) -> "WorkloadColumns":
        """Columns of `groups` packed batches: workload members[j] belongs to batch owners[j]."""
        # One bincount over (batch, aggregate) cells: cell 4 * owner + column.
        cells = (owners[:, None] * 4 + np.arange(4)).ravel()
        sums = np.bincount(cells, weights=self.values[members].ravel(), minlength=4 * groups)
        return WorkloadColumns(sums.reshape(groups, 4))

    def workload(self, k: int) -> GroupWorkload:
        """Workload k as a `GroupWorkload`."""
        total, docs, sq, vision = (int(x) for x in self.values[k])
        return GroupWorkload(total, docs, sq, vision)
