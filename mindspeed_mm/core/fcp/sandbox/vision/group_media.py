"""The videos of a CP group's packed batch as the product's media split sees them (`core/fcp/runtime/media_pieces`).

Each sample's video is one medium: a patch grid of (frame groups, grid rows x merge, grid columns x merge). Its
merged vision tokens follow each other in the packed batch frame group after frame group, row by row, which is
the order of the encoder's rows, so the group's feature rows are its vision tokens in packed order. The split
(which member encodes which frame groups) and the exchange of rows are the product's; this module only describes
the group's media, and loads the frame groups of a range of the group's pixel rows (a rank loads exactly the
frame groups it encodes).
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mindspeed_mm.core.fcp.parallel import ZigzagLayout, zigzag_layout
from mindspeed_mm.core.fcp.runtime.media_pieces import MediaItem, assign_media, media_items, media_pieces
from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout
from mindspeed_mm.core.fcp.solver.short_shards import executed_lengths


@dataclass(frozen=True)
class GroupMedia:
    """The media of one CP group's packed batch (with its padding document, if any, which has none)."""

    items: tuple[MediaItem, ...]
    """One per sample, in packed order; pixel rows index the samples' patches concatenated."""
    samples: tuple[int, ...]
    """Dataset index of each item's sample."""
    layouts: tuple[VideoSampleLayout, ...]
    zigzag: ZigzagLayout
    """Zigzag layout of the packed batch."""
    feature_rows: torch.Tensor
    """`[packed tokens]` int64: each token's row of the group's vision features, -1 for a text token."""

    def needed_rows(self, member: int) -> torch.Tensor:
        """The feature rows member `member`'s shard needs, in shard order."""
        rows = self.feature_rows[self.zigzag.shard(member).global_index]
        return rows[rows >= 0]

    def vision_positions(self, member: int) -> torch.Tensor:
        """Where in member `member`'s shard its vision tokens sit, in shard order."""
        rows = self.feature_rows[self.zigzag.shard(member).global_index]
        return torch.nonzero(rows >= 0).reshape(-1)

    @property
    def member_patches(self) -> list[int]:
        """Patches each member encodes under the product's split (`media_pieces`, `assign_media`)."""
        pieces = media_pieces(self.items, self.zigzag.degree)
        loads = [0] * self.zigzag.degree
        for piece, owner in zip(pieces, assign_media([piece.patches for piece in pieces], self.zigzag.degree)):
            loads[owner] += piece.patches
        return loads

    def frame_groups(self, start: int, stop: int) -> list[tuple[int, int]]:
        """(dataset index, frame group) of the group's pixel rows `start`..`stop` (whole frame groups of one
        sample, as every piece of the split is)."""
        firsts = [item.pixel_rows[0] for item in self.items]
        k = bisect.bisect_right(firsts, start) - 1
        item, per_group = self.items[k], self.layouts[k].patches_per_group
        first, last = divmod(start - item.pixel_rows[0], per_group), divmod(stop - item.pixel_rows[0], per_group)
        if first[1] or last[1] or stop > item.pixel_rows[1]:
            raise ValueError(f"pixel rows {start}..{stop} are not whole frame groups of one sample")
        return [(self.samples[k], group) for group in range(first[0], last[0])]


def group_media(layouts: Sequence[VideoSampleLayout], sample_indices: Sequence[int], degree: int) -> GroupMedia:
    """The media of samples with these layouts packed in order for a group of `degree` ranks."""
    if len(layouts) != len(sample_indices):
        raise ValueError(f"need one sample index per layout: {len(layouts)} layouts, {len(sample_indices)} indices")
    lengths = [layout.length for layout in layouts]
    cu_seqlens = cumulative_lengths(executed_lengths(lengths, degree))
    vision = torch.zeros(int(cu_seqlens[-1]), dtype=torch.bool)
    for start, layout in zip(cu_seqlens.tolist(), layouts):
        vision[start + layout.vision_start: start + layout.caption_start] = True
    feature_rows = torch.full(vision.shape, -1, dtype=torch.int64)
    feature_rows[vision] = torch.arange(int(vision.sum()))
    merge = [layout.spatial_merge_size for layout in layouts]
    grids = torch.tensor([[layout.frame_groups, layout.grid_rows * m, layout.grid_cols * m]
                          for layout, m in zip(layouts, merge)], dtype=torch.int64).reshape(-1, 3)
    return GroupMedia(items=tuple(media_items(grids)), samples=tuple(int(i) for i in sample_indices),
                      layouts=tuple(layouts), zigzag=zigzag_layout(cu_seqlens, degree), feature_rows=feature_rows)


__all__ = ["GroupMedia", "group_media"]
