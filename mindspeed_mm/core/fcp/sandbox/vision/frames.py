"""Frame groups of a CP group's packed batch and their assignment to the group's ranks.

The vision encoder attends only inside one frame group, so a frame group is an independent unit of
encoder work, and encoding disjoint sets of units on different ranks is exact. The units of all the
group's samples are spread over its ranks by patch count, longest first, each to the least loaded
rank (LPT: the most loaded rank holds at most the mean + one unit's patches). Ties go to the rank
whose zigzag shard holds most of the unit's tokens (less to exchange), then to the lower rank. The
assignment is a pure function of metadata, so every rank of the group computes the same one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths, packed_lengths
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout
from mindspeed_mm.core.fcp.parallel import ZigzagLayout, zigzag_layout


@dataclass(frozen=True)
class FrameUnit:
    """One frame group of one sample of a packed batch: the unit of vision encoder work."""

    doc: int
    """Position of the sample in the packed batch."""
    sample_index: int
    """Dataset index of the sample."""
    group: int
    """Frame group inside the sample."""
    patches: int
    """Encoder patches of the frame group."""
    token_start: int
    """Index, in the packed batch, of the frame group's first merged vision token."""
    tokens: int
    """Merged vision tokens of the frame group (consecutive in the packed batch)."""


def frame_units(
    layouts: Sequence[VideoSampleLayout], sample_indices: Sequence[int], doc_starts: Sequence[int]
) -> tuple[FrameUnit, ...]:
    """Every frame group of the packed samples, in packed order.

    `doc_starts[k]` is where sample k (dataset index `sample_indices[k]`) starts in the packed batch.
    """
    if not len(layouts) == len(sample_indices) <= len(doc_starts):
        raise ValueError(
            f"need one sample index and one start per layout: {len(layouts)} layouts, {len(sample_indices)} "
            f"indices, {len(doc_starts)} starts"
        )
    return tuple(
        FrameUnit(
            doc=doc,
            sample_index=int(sample_indices[doc]),
            group=group,
            patches=layout.patches_per_group,
            token_start=int(doc_starts[doc]) + layout.group_token_start(group),
            tokens=layout.tokens_per_group,
        )
        for doc, layout in enumerate(layouts)
        for group in range(layout.frame_groups)
    )


def token_holders(layout: ZigzagLayout) -> torch.Tensor:
    """`[total_tokens]` int64 group rank whose zigzag shard holds each token of the packed batch."""
    holders = torch.empty(layout.total_tokens, dtype=torch.int64)
    for rank, shard in enumerate(layout.shards):
        holders[shard.global_index] = rank
    return holders


def assign_frame_units(units: Sequence[FrameUnit], degree: int, holders: torch.Tensor) -> tuple[int, ...]:
    """Group rank that encodes each unit (LPT on patches; ties: zigzag locality, then lower rank)."""
    if degree < 1:
        raise ValueError(f"degree must be >= 1, got {degree}")
    loads = [0] * degree
    owners = [0] * len(units)
    for position in sorted(range(len(units)), key=lambda i: (-units[i].patches, i)):
        unit = units[position]
        held = torch.bincount(holders[unit.token_start : unit.token_start + unit.tokens], minlength=degree).tolist()
        rank = min(range(degree), key=lambda r: (loads[r], -held[r], r))
        owners[position] = rank
        loads[rank] += unit.patches
    return tuple(owners)


def rank_patch_loads(units: Sequence[FrameUnit], owners: Sequence[int], degree: int) -> list[int]:
    """Patches each group rank encodes under the assignment `owners`."""
    loads = [0] * degree
    for unit, owner in zip(units, owners):
        loads[owner] += unit.patches
    return loads


@dataclass(frozen=True)
class GroupVisionWork:
    """The vision encoder work of one CP group in one round, and who does which part."""

    zigzag: ZigzagLayout
    """Zigzag layout of the group's packed batch (with its padding document, if any)."""
    units: tuple[FrameUnit, ...]
    """Every frame group of the packed batch, in packed order."""
    owners: tuple[int, ...]
    """Group rank that encodes each unit."""
    holders: torch.Tensor
    """`[total_tokens]` int64 group rank whose zigzag shard holds each packed token."""

    @property
    def rank_patches(self) -> list[int]:
        """Patches each group rank encodes."""
        return rank_patch_loads(self.units, self.owners, self.zigzag.degree)


def split_group_vision(
    layouts: Sequence[VideoSampleLayout], sample_indices: Sequence[int], degree: int
) -> GroupVisionWork:
    """Packs the samples as the round batch does and assigns their frame groups to the group's ranks."""
    cu_seqlens = cumulative_lengths(packed_lengths([layout.length for layout in layouts], degree))
    zigzag = zigzag_layout(cu_seqlens, degree)
    units = frame_units(layouts, sample_indices, cu_seqlens[:-1].tolist())
    holders = token_holders(zigzag)
    owners = assign_frame_units(units, degree, holders)
    return GroupVisionWork(zigzag=zigzag, units=units, owners=owners, holders=holders)
