"""Which rank of a round encodes which part of its media: metadata only, identical on every rank.

A medium (image or video) is a patch grid (t, h, w) of the vision tower; `t` counts its frame groups (temporal
patches). A model whose tower attends within a frame group and places patches by their (h, w) position alone
(the adapter's `VisionTower.frame_groups_independent`) gives, for any contiguous range of frame groups encoded as
a video of its own, exactly the rows the whole video gives for them. So a video of more patches than a rank's
even share of the round's is cut into that many ranges (`media_pieces`); images and shorter videos stay whole.
Pieces go to ranks largest first (`solver.balance.largest_first`): within a CP group to its least loaded member
(`assign_media`); spread over a round (`round_media`), to the least loaded member of the piece's own group while
that stays within the round's share, else to the least loaded rank of the round.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mindspeed_mm.core.fcp.solver.balance import largest_first


@dataclass(frozen=True)
class MediaItem:
    """One image or video of a round (or a range of a video's frame groups), in the model's feature-row order."""

    grid: torch.Tensor
    """`[3]` (t, h, w) patch grid."""
    pixel_rows: tuple[int, int]
    """Its rows of the concatenated pixel values (images then videos)."""

    @property
    def patches(self) -> int:
        return int(self.grid.prod())


def media_items(*grids: torch.Tensor | None) -> list[MediaItem]:
    """The media of `grids` (each `[n, 3]` or None), in order, their pixel rows consecutive."""
    present = [g for g in grids if g is not None]
    items, start = [], 0
    for grid in (torch.cat(present) if present else torch.zeros(0, 3, dtype=torch.int64)):
        patches = int(grid.prod())
        items.append(MediaItem(grid, (start, start + patches)))
        start += patches
    return items


def media_pieces(items: Sequence[MediaItem], ranks: int, split_videos: bool = True) -> list[MediaItem]:
    """The media cut for `ranks` encoders: with `split_videos`, each video of more patches than ceil(all
    patches / ranks) into that many near-equal ranges of its frame groups (at most one per frame group), in frame
    order; every other medium whole. The pieces' feature rows, in order, are the media's."""
    share = -(-sum(item.patches for item in items) // ranks) if items else 0
    pieces: list[MediaItem] = []
    for item in items:
        frames, height, width = (int(v) for v in item.grid)
        count = min(frames, -(-item.patches // share)) if share and split_videos else 1
        if count <= 1:
            pieces.append(item)
            continue
        first = item.pixel_rows[0]
        bounds = [k * frames // count for k in range(count + 1)]
        for start, stop in zip(bounds, bounds[1:]):
            grid = torch.tensor([stop - start, height, width], dtype=item.grid.dtype)
            pieces.append(MediaItem(grid, (first + start * height * width, first + stop * height * width)))
    return pieces


def assign_media(patches: Sequence[int], degree: int) -> list[int]:
    """The member encoding each medium: largest first to the least loaded member (ties: lowest index)."""
    return largest_first(patches, degree)


@dataclass(frozen=True)
class RoundGroup:
    """One CP group of a round, as every rank of the round learns it (`media_exchange.encode_media_over_round`)."""

    first_rank: int
    """Its first rank in the round's process group; its members are the next `degree` ranks."""
    degree: int
    grids: tuple[tuple[int, int, int], ...]
    """(t, h, w) of each of its media, in the model's order."""

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.degree)

    @property
    def patches(self) -> int:
        return sum(t * h * w for t, h, w in self.grids)


@dataclass(frozen=True)
class RoundMedia:
    """The media of every group of a round, cut for all the round's ranks, and who encodes each piece."""

    groups: tuple[RoundGroup, ...]
    """In rank order."""
    pieces: tuple[MediaItem, ...]
    """Pixel rows index the groups' pixels concatenated in group order, as the pieces' feature rows do."""
    group_of: tuple[int, ...]
    """The group each piece belongs to."""
    owners: tuple[int, ...]
    """The rank encoding each piece."""

    def offset(self, group: int, merge_area: int = 1) -> int:
        """Where `group`'s pixel rows (feature rows with `merge_area`) start in the round's."""
        return sum(g.patches for g in self.groups[:group]) // merge_area

    def home(self, piece: int) -> range:
        return self.groups[self.group_of[piece]].ranks

    def pixel_source(self, piece: int) -> int:
        """The member of its group that sends a piece encoded elsewhere its pixels (piece index mod degree)."""
        home = self.home(piece)
        return home[piece % len(home)]

    @property
    def moved(self) -> list[int]:
        """The pieces encoded outside their group."""
        return [i for i, owner in enumerate(self.owners) if owner not in self.home(i)]


def assign_over_round(pieces: Sequence[MediaItem], home: Sequence[range], ranks: int) -> list[int]:
    """The rank of the round encoding each piece: largest first, to the least-loaded member of its own group while
    that stays within the round's share (ceil(patches / ranks)), else to the least-loaded rank of the round (ties:
    its own group's, then the lowest). `home[i]`: the ranks of piece i's group."""
    patches = [piece.patches for piece in pieces]
    share = -(-sum(patches) // ranks) if pieces else 0

    def choose(index: int, loads: Sequence[int]) -> int:
        own = home[index]
        member = min(own, key=lambda r: (loads[r], r))
        if loads[member] + patches[index] > share:
            member = min(range(ranks), key=lambda r: (loads[r], r not in own, r))
        return member

    return largest_first(patches, ranks, choose)


def round_media(groups: Sequence[RoundGroup], ranks: int, split_videos: bool = True) -> RoundMedia:
    """The round's media cut for its `ranks` ranks (`media_pieces`) and assigned (`assign_over_round`)."""
    items: list[MediaItem] = []
    group_of_item: list[int] = []
    start = 0
    for index, group in enumerate(groups):
        grids = torch.tensor(group.grids, dtype=torch.int64).reshape(-1, 3)
        for item in media_items(grids):
            items.append(MediaItem(item.grid, (start + item.pixel_rows[0], start + item.pixel_rows[1])))
            group_of_item.append(index)
        start += group.patches
    pieces = media_pieces(items, ranks, split_videos)
    starts = [item.pixel_rows[0] for item in items]
    group_of = tuple(group_of_item[bisect.bisect_right(starts, piece.pixel_rows[0]) - 1] for piece in pieces)
    owners = assign_over_round(pieces, [groups[g].ranks for g in group_of], ranks)
    return RoundMedia(tuple(groups), tuple(pieces), group_of, tuple(owners))


__all__ = ["MediaItem", "RoundGroup", "RoundMedia", "assign_media", "assign_over_round", "media_items",
           "media_pieces", "round_media"]
