"""The vision tower of a round split over its CP group: each image or video is encoded once, by one member.

Every member of a group needs the features of all the group's images and videos (each keeps those of its
own shard's tokens). Media are assigned to members by patch count (largest first to the least loaded
member, identically on every rank); each member encodes its media in one call of the vision tower, and
one all-gather over the group hands everyone every feature row. The gather is differentiable: the backward
pass sums each row's gradient over the members (all of them may hold tokens of that row's medium) and
returns it to the member that encoded it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class MediaItem:
    """One image or video of a round, in the model's order (images first, then videos)."""

    grid: torch.Tensor
    """`[3]` (t, h, w) patch grid."""
    pixel_rows: tuple[int, int]
    """Its rows of the concatenated pixel values (images then videos)."""

    @property
    def patches(self) -> int:
        return int(self.grid.prod())


def media_items(image_grid: torch.Tensor | None, video_grid: torch.Tensor | None) -> list[MediaItem]:
    grids = [g for g in (image_grid, video_grid) if g is not None]
    items, start = [], 0
    for grid in (torch.cat(grids) if grids else torch.zeros(0, 3, dtype=torch.int64)):
        patches = int(grid.prod())
        items.append(MediaItem(grid, (start, start + patches)))
        start += patches
    return items


def assign_media(patches: Sequence[int], degree: int) -> list[int]:
    """The member encoding each medium: largest first to the least loaded member (ties: lowest index)."""
    loads = [0] * degree
    owners = [0] * len(patches)
    for index in sorted(range(len(patches)), key=lambda i: (-patches[i], i)):
        member = min(range(degree), key=lambda r: (loads[r], r))
        owners[index] = member
        loads[member] += patches[index]
    return owners


class _GatherRows(torch.autograd.Function):
    """All-gather of a variable number of rows per member; backward: each member's rows get the sum of their
    gradients over the group."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, counts: tuple[int, ...], rank: int,  # type: ignore[override]
                group: dist.ProcessGroup) -> torch.Tensor:
        ctx.counts, ctx.rank, ctx.group = counts, rank, group
        width = max(counts)
        padded = local.new_zeros((width,) + tuple(local.shape[1:]))
        padded[: local.shape[0]] = local
        gathered = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(gathered, padded.contiguous(), group=group)
        return torch.cat([chunk[:count] for chunk, count in zip(gathered, counts)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        start = sum(ctx.counts[: ctx.rank])
        return grad[start: start + ctx.counts[ctx.rank]], None, None, None


def encode_media_in_group(encode: Any, stand_in: Any, pixels: torch.Tensor | None, items: Sequence[MediaItem],
                          merge_area: int, width: int, rank: int, degree: int,
                          group: dist.ProcessGroup) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`[rows, width]` vision rows of all `items` in their order (features, then each deepstack layer's, side by
    side), each medium encoded by one member, and the zero-valued anchor of a stand-in call (or None).

    `encode(pixels, grids)` runs the vision tower and returns one `[rows, width]` tensor; `stand_in()` runs it
    on a stand-in input, for a member without media, and returns the anchor."""
    owners = assign_media([item.patches for item in items], degree)
    mine = [i for i, owner in enumerate(owners) if owner == rank]
    anchor = None
    if mine:
        rows = torch.cat([pixels[items[i].pixel_rows[0]: items[i].pixel_rows[1]] for i in mine])
        local = encode(rows, torch.stack([items[i].grid for i in mine]))
    else:
        anchor = stand_in()
        # Tied to the anchor, so that this member's backward pass joins the gather's reduction like the others'.
        local = anchor.new_zeros(0, width) + anchor
    rows_of = [item.patches // merge_area for item in items]
    counts = tuple(sum(rows_of[i] for i, owner in enumerate(owners) if owner == member) for member in range(degree))
    gathered = _GatherRows.apply(local, counts, rank, group)
    # Back to the items' order: member m's rows hold its items in increasing item order.
    starts = [sum(counts[:m]) for m in range(degree)]
    offsets, order = list(starts), []
    for index, owner in enumerate(owners):
        order.append(torch.arange(offsets[owner], offsets[owner] + rows_of[index]))
        offsets[owner] += rows_of[index]
    ordered = gathered[torch.cat(order).to(gathered.device)] if order else gathered[:0]
    return ordered, anchor
