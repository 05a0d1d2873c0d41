"""Vision encoder work per rank of a plan when each group splits its videos over its ranks.

Metadata only (no model, no communication): the product's split the VLM runner executes (`group_media`), so the
figures are those a run of the plan would show. `replicated` gives, for comparison, what each rank would
encode if every rank of a group ran the encoder over all of the group's frames.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.sandbox.vision.group_media import group_media
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout
from mindspeed_mm.core.fcp.solver import Plan
from mindspeed_mm.core.fcp.solver.plan import IDLE


@dataclass(frozen=True)
class VisionBalance:
    """Encoder patches per rank of one plan."""

    rank_patches: np.ndarray
    """`[rounds, ranks]` int64 patches each rank encodes in each round."""
    replicated: np.ndarray
    """`[rounds, ranks]` int64 patches each rank would encode if its group's ranks all encoded every frame."""
    group_loads: tuple[tuple[int, ...], ...]
    """Patches of each rank of every multi-rank group of the plan (all rounds), group by group."""

    @property
    def step_max_over_mean(self) -> float:
        """Max / mean over ranks of the patches a rank encodes in the whole step (1 = even)."""
        per_rank = self.rank_patches.sum(axis=0)
        return float(per_rank.max() / per_rank.mean())

    @property
    def group_max_over_mean(self) -> tuple[float, ...]:
        """Max / mean over its ranks of each multi-rank group's patches: how evenly a group splits its frames."""
        return tuple(max(loads) / (sum(loads) / len(loads)) for loads in self.group_loads)

    @property
    def weighted_group_max_over_mean(self) -> float:
        """Group max / mean weighted by the group's patches: the time lost inside groups, as a factor."""
        total = sum(sum(loads) for loads in self.group_loads)
        slowest = sum(max(loads) * len(loads) for loads in self.group_loads)
        return slowest / total if total else 1.0

    @property
    def replicated_over_split(self) -> float:
        """How many times more patches the busiest rank would encode in a step with the encoder replicated."""
        return float(self.replicated.sum(axis=0).max() / self.rank_patches.sum(axis=0).max())


def plan_vision_balance(plan: Plan, layouts: Sequence[VideoSampleLayout]) -> VisionBalance:
    """Vision work per rank of `plan`; `layouts[i]` is the layout of sample i of the plan's batch."""
    rank_patches = np.zeros((len(plan.rounds), plan.num_ranks), dtype=np.int64)
    replicated = np.zeros_like(rank_patches)
    group_loads = []
    for r, round_plan in enumerate(plan.rounds):
        for group in round_plan.groups:
            if group.algo == IDLE:
                continue
            loads = group_media([layouts[s] for s in group.samples], list(group.samples), group.degree).member_patches
            rank_patches[r, list(group.ranks)] = loads
            replicated[r, list(group.ranks)] = sum(loads)
            if group.degree > 1:
                group_loads.append(tuple(loads))
    return VisionBalance(rank_patches=rank_patches, replicated=replicated, group_loads=tuple(group_loads))
