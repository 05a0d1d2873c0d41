"""The vision tower of a round split over its CP group: each image or video is encoded once, and each member
receives only the feature rows its own shard needs.

A video of more patches than a member's even share of the round's is cut into contiguous ranges of its frame
groups (Qwen3-VL's temporal patches), one piece per share it holds (`media_pieces`): the encoder attends within
a frame group and places its patches by their (h, w) position alone, so a range of frame groups encoded as a
video of its own gives exactly that video's rows for those frame groups. Images and shorter videos stay whole.
Pieces are assigned to members by patch count (largest first to the least loaded member, identically on every
rank); each member encodes its pieces in one call of the vision tower. Every rank knows every member's shard,
so one uneven all-to-all sends each member the rows of the visual tokens in its shard, from the members that
encoded them: no member holds the features of the whole group. The exchange is differentiable: its backward
pass is the reverse all-to-all, and each encoded row gets the sum of its gradients from the members using it.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.collectives import all_to_all_rows

logger = logging.getLogger(__name__)


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


def media_pieces(items: Sequence[MediaItem], degree: int) -> list[MediaItem]:
    """The round's media cut for `degree` members: each video of more patches than ceil(round's patches /
    degree) into that many near-equal ranges of its frame groups (at most one per frame group), in frame order;
    every other medium whole. The pieces' feature rows, in order, are the media's."""
    share = -(-sum(item.patches for item in items) // degree) if items else 0
    pieces: list[MediaItem] = []
    for item in items:
        frames, height, width = (int(v) for v in item.grid)
        count = min(frames, -(-item.patches // share)) if share else 1
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
    loads = [0] * degree
    owners = [0] * len(patches)
    for index in sorted(range(len(patches)), key=lambda i: (-patches[i], i)):
        member = min(range(degree), key=lambda r: (loads[r], r))
        owners[index] = member
        loads[member] += patches[index]
    return owners


class _ExchangeRows(torch.autograd.Function):
    """Uneven all-to-all of rows over a group; backward: the reverse all-to-all of their gradients."""

    @staticmethod
    def forward(ctx: Any, send: torch.Tensor, send_counts: tuple[int, ...],  # type: ignore[override]
                recv_counts: tuple[int, ...], group: dist.ProcessGroup) -> torch.Tensor:
        ctx.send_counts, ctx.recv_counts, ctx.group = send_counts, recv_counts, group
        received, _ = all_to_all_rows(send, send_counts, recv_counts, group)
        return received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        returned, _ = all_to_all_rows(grad.contiguous(), ctx.recv_counts, ctx.send_counts, ctx.group)
        return returned, None, None, None


def _row_owners(items: Sequence[MediaItem], owners: Sequence[int], merge_area: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """For every feature row of the round (items' order): `[rows]` the member encoding it and `[rows]` its index
    among that member's encoded rows (a member encodes its items in increasing item order)."""
    member_of, local_of, next_local = [], [], [0] * (max(owners) + 1 if owners else 0)
    for item, owner in zip(items, owners):
        rows = item.patches // merge_area
        member_of.append(torch.full((rows,), owner, dtype=torch.int64))
        local_of.append(torch.arange(next_local[owner], next_local[owner] + rows))
        next_local[owner] += rows
    if not member_of:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    return torch.cat(member_of), torch.cat(local_of)


def encode_media_in_group(encode: Any, stand_in: Any, pixels: torch.Tensor | None, items: Sequence[MediaItem],
                          merge_area: int, width: int, needed_rows: Sequence[torch.Tensor], rank: int,
                          group: dist.ProcessGroup, log: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`[len(needed_rows[rank]), width]` vision rows (features, then each deepstack layer's, side by side) of
    the round's feature rows `needed_rows[rank]` (indices into all items' rows, in the order wanted), and the
    zero-valued anchor of a stand-in call (or None). Long videos are encoded in pieces (`media_pieces`).

    `needed_rows[m]`: the rows member m's shard needs (every rank passes the same list, one entry per member).
    `encode(pixels, grids)` runs the vision tower and returns one `[rows, width]` tensor; `stand_in()` runs it
    on a stand-in input, for a member without media, and returns the anchor. `log`: the group's first member logs
    the videos it cut."""
    degree = len(needed_rows)
    pieces = media_pieces(items, degree)
    if log and rank == 0 and len(pieces) > len(items):
        logger.info("FCP vision: %d media of %d patches encoded as %d pieces over %d members (long videos cut into "
                    "frame-group ranges)", len(items), sum(item.patches for item in items), len(pieces), degree)
    owners = assign_media([piece.patches for piece in pieces], degree)
    mine = [i for i, owner in enumerate(owners) if owner == rank]
    anchor = None
    if mine:
        pixel_rows = torch.cat([pixels[pieces[i].pixel_rows[0]: pieces[i].pixel_rows[1]] for i in mine])
        local = encode(pixel_rows, torch.stack([pieces[i].grid for i in mine]))
    else:
        anchor = stand_in()
        # Tied to the anchor, so that this member's backward pass joins the exchange like the others'.
        local = anchor.new_zeros(0, width) + anchor
    member_of, local_of = _row_owners(pieces, owners, merge_area)
    # To each member m, in member order: the rows m needs that this rank encoded, in m's order.
    sends = [local_of[wanted[member_of[wanted] == rank]] for wanted in needed_rows]
    send_counts = tuple(int(s.numel()) for s in sends)
    wanted = needed_rows[rank]
    sources = member_of[wanted]
    recv_counts = tuple(int((sources == member).sum()) for member in range(degree))
    send = local[torch.cat(sends).to(local.device)]  # [sum(send_counts), width]
    received = _ExchangeRows.apply(send, send_counts, recv_counts, group)  # [len(wanted), width], by source
    # Back to the wanted order: the received rows come grouped by source member, each group in wanted order.
    by_source = torch.cat([torch.nonzero(sources == member).reshape(-1) for member in range(degree)])
    order = torch.empty_like(by_source)
    order[by_source] = torch.arange(by_source.numel())
    return received[order.to(received.device)], anchor
