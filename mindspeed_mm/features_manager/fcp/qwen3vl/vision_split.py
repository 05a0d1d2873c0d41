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

import bisect
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


def _encode_and_exchange(encode: Any, stand_in: Any, local_pixels: list[torch.Tensor], local_grids: list[torch.Tensor],
                         pieces: Sequence[MediaItem], owners: Sequence[int], merge_area: int, width: int,
                         needed_rows: Sequence[torch.Tensor], rank: int, group: dist.ProcessGroup
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """This rank encodes its pieces (`local_pixels` / `local_grids`, in piece order) in one call, then one uneven
    all-to-all over `group` sends every rank m the rows `needed_rows[m]` (indices into all pieces' rows) in m's
    order. Returns this rank's `[len(needed_rows[rank]), width]` rows and the anchor of a stand-in call (or None)."""
    anchor = None
    if local_pixels:
        local = encode(torch.cat(local_pixels), torch.stack(local_grids))
    else:
        anchor = stand_in()
        # Tied to the anchor, so that this rank's backward pass joins the exchange like the others'.
        local = anchor.new_zeros(0, width) + anchor
    member_of, local_of = _row_owners(pieces, owners, merge_area)
    # To each rank m, in rank order: the rows m needs that this rank encoded, in m's order.
    sends = [local_of[wanted[member_of[wanted] == rank]] for wanted in needed_rows]
    send_counts = tuple(int(s.numel()) for s in sends)
    wanted = needed_rows[rank]
    sources = member_of[wanted]
    recv_counts = tuple(int((sources == member).sum()) for member in range(len(needed_rows)))
    send = local[torch.cat(sends).to(local.device)]  # [sum(send_counts), width]
    received = _ExchangeRows.apply(send, send_counts, recv_counts, group)  # [len(wanted), width], by source
    # Back to the wanted order: the received rows come grouped by source rank, each group in wanted order.
    by_source = torch.cat([torch.nonzero(sources == member).reshape(-1) for member in range(len(needed_rows))])
    order = torch.empty_like(by_source)
    order[by_source] = torch.arange(by_source.numel())
    return received[order.to(received.device)], anchor


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
    return _encode_and_exchange(encode, stand_in, [pixels[pieces[i].pixel_rows[0]: pieces[i].pixel_rows[1]] for i in mine],
                                [pieces[i].grid for i in mine], pieces, owners, merge_area, width, needed_rows, rank,
                                group)


@dataclass(frozen=True)
class RoundGroup:
    """One CP group of a round, as every rank of the round learns it (`encode_media_over_round`)."""

    first_rank: int
    """Its first rank in the round's process group; its members are the next `degree` ranks."""
    degree: int
    grids: tuple[tuple[int, int, int], ...]
    """(t, h, w) of each of its media, in the model's order (images first, then videos)."""


def _runs(rows: torch.Tensor) -> list[tuple[int, int]]:
    """`rows` (1-D int) as (start, length) runs of consecutive values, in order: a zigzag shard's visual rows are
    a few such runs."""
    values = rows.tolist()
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return [(start, length) for start, length in runs]


def _rows_of(runs: Sequence[tuple[int, int]], offset: int) -> torch.Tensor:
    if not runs:
        return torch.zeros(0, dtype=torch.int64)
    return torch.cat([torch.arange(offset + start, offset + start + length) for start, length in runs])


def assign_over_round(pieces: Sequence[MediaItem], home: Sequence[range], ranks: int) -> list[int]:
    """The rank of the round encoding each piece: largest first, to the least-loaded member of its own group while
    that stays within the round's share (ceil(patches / ranks)), else to the least-loaded rank of the round (ties:
    its own group's, then the lowest). `home[i]`: the ranks of piece i's group."""
    share = -(-sum(piece.patches for piece in pieces) // ranks) if pieces else 0
    loads = [0] * ranks
    owners = [0] * len(pieces)
    for index in sorted(range(len(pieces)), key=lambda i: (-pieces[i].patches, i)):
        patches, own = pieces[index].patches, home[index]
        member = min(own, key=lambda r: (loads[r], r))
        if loads[member] + patches > share:
            member = min(range(ranks), key=lambda r: (loads[r], r not in own, r))
        owners[index] = member
        loads[member] += patches
    return owners


def encode_media_over_round(encode: Any, stand_in: Any, pixels: torch.Tensor | None, items: Sequence[MediaItem],
                            merge_area: int, width: int, needed_rows: Sequence[torch.Tensor], rank_in_group: int,
                            group_first_rank: int, round_rank: int, round_group: dist.ProcessGroup,
                            pixel_width: int, log: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """As `encode_media_in_group`, but the media of every group of the round are encoded by all the round's ranks
    (`vision_phases`: a round whose plan says `vision_over_round`).

    Every rank passes its own group's `items`, `pixels` (`[patches, pixel_width]`) and `needed_rows` (one entry
    per member, indices into the group's feature rows). One gather over `round_group` tells every rank every
    group's media and every rank's needed rows (as runs); the round's media are cut for all its ranks
    (`media_pieces`) and assigned (`assign_over_round`); a piece encoded outside its group gets its pixels from
    one member of its group (an all-to-all of pixel rows), and one all-to-all sends every rank the rows its shard
    needs (`_encode_and_exchange`). `round_rank`: this rank in `round_group`."""
    ranks = dist.get_world_size(round_group)
    mine = (group_first_rank, len(needed_rows), tuple(tuple(int(v) for v in item.grid) for item in items),
            _runs(needed_rows[rank_in_group]),
            None if pixels is None else str(pixels.dtype).removeprefix("torch."))
    gathered: list[Any] = [None] * ranks
    dist.all_gather_object(gathered, mine, group=round_group)
    groups = sorted({(first, degree, grids) for first, degree, grids, _, _ in gathered})
    dtypes = {dtype for *_, dtype in gathered if dtype is not None}
    if len(dtypes) > 1:
        raise ValueError(f"the round's pixel values come in several dtypes ({sorted(dtypes)})")
    # Every group's media, in group order: (group index, the medium with its pixel rows in its group's pixels).
    all_items: list[MediaItem] = []
    group_of: list[int] = []
    row_offsets, pixel_offsets, rows, patches = [], [], 0, 0
    for index, (first, degree, grids) in enumerate(groups):
        row_offsets.append(rows)
        pixel_offsets.append(patches)
        for item in media_items(None, torch.tensor(grids, dtype=torch.int64).reshape(-1, 3)):
            all_items.append(MediaItem(item.grid, (patches + item.pixel_rows[0], patches + item.pixel_rows[1])))
            group_of.append(index)
        group_patches = sum(int(torch.tensor(g).prod()) for g in grids)
        rows += group_patches // merge_area
        patches += group_patches
    needed = [_rows_of(runs, row_offsets[next(i for i, g in enumerate(groups) if g[0] == first)])
              for first, _, _, runs, _ in gathered]
    pieces = media_pieces(all_items, ranks)
    piece_group = [group_of[_item_of(all_items, piece)] for piece in pieces]
    home = [range(groups[g][0], groups[g][0] + groups[g][1]) for g in piece_group]
    owners = assign_over_round(pieces, home, ranks)
    if log and round_rank == 0:
        moved = sum(piece.patches for piece, owner, own in zip(pieces, owners, home) if owner not in own)
        logger.info("FCP vision: the round's %d media of %d patches encoded over its %d ranks as %d pieces, %d patches "
                    "outside their group", len(all_items), patches, ranks, len(pieces), moved)
    my_group = next(i for i, g in enumerate(groups) if g[0] == group_first_rank)
    # Pixels of the pieces encoded outside their group: from the member (piece index mod degree) of the group.
    sends: list[list[int]] = [[] for _ in range(ranks)]
    for index, (piece, owner, own) in enumerate(zip(pieces, owners, home)):
        if owner not in own and piece_group[index] == my_group and own[index % len(own)] == round_rank:
            sends[owner].append(index)
    receives = [index for index, (owner, own) in enumerate(zip(owners, home))
                if owner == round_rank and owner not in own]
    dtype = getattr(torch, dtypes.pop()) if dtypes else torch.float32
    local_pixels: dict[int, torch.Tensor] = {}
    # A collective of all the round's ranks, whenever any piece leaves its group (the same answer on every rank).
    if any(owner not in own for owner, own in zip(owners, home)):
        def rows_of_piece(index: int) -> torch.Tensor:
            start, stop = pieces[index].pixel_rows
            offset = pixel_offsets[my_group]
            return pixels[start - offset: stop - offset]

        device = pixels.device if pixels is not None else _device_of(round_group)
        send = torch.cat([rows_of_piece(i) for dest in sends for i in dest] or
                         [torch.zeros(0, pixel_width, dtype=dtype, device=device)])
        send_counts = [sum(pieces[i].patches for i in dest) for dest in sends]
        recv_counts = [0] * ranks
        for index in receives:
            own = home[index]
            recv_counts[own[index % len(own)]] += pieces[index].patches
        with torch.no_grad():
            received, _ = all_to_all_rows(send.to(dtype), send_counts, recv_counts, round_group)
        # Received grouped by source rank, each in piece order.
        start_of, cursor = {}, [sum(recv_counts[:r]) for r in range(ranks)]
        for index in receives:
            source = home[index][index % len(home[index])]
            start_of[index] = cursor[source]
            cursor[source] += pieces[index].patches
        local_pixels = {i: received[start_of[i]: start_of[i] + pieces[i].patches] for i in receives}
    encoded = [i for i, owner in enumerate(owners) if owner == round_rank]
    pixel_rows = []
    for index in encoded:
        if index in local_pixels:
            pixel_rows.append(local_pixels[index])
        else:
            start, stop = pieces[index].pixel_rows
            pixel_rows.append(pixels[start - pixel_offsets[my_group]: stop - pixel_offsets[my_group]])
    return _encode_and_exchange(encode, stand_in, pixel_rows, [pieces[i].grid for i in encoded], pieces, owners,
                                merge_area, width, needed, round_rank, round_group)


def _item_of(items: Sequence[MediaItem], piece: MediaItem) -> int:
    """The medium a piece was cut from (pieces lie inside one medium's pixel rows; media are in row order)."""
    return bisect.bisect_right([item.pixel_rows[0] for item in items], piece.pixel_rows[0]) - 1


def _device_of(group: dist.ProcessGroup) -> torch.device:
    """Where tensors exchanged on `group` live: the accelerator for NCCL / HCCL, else the CPU."""
    backend = dist.get_backend(group)
    if backend == "gloo":
        return torch.device("cpu")
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.current_accelerator() is not None:
        return accelerator.current_accelerator()
    return torch.device("cuda")
