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
from mindspeed_mm.core.fcp.parallel.device import collective_device

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
    pixel_rows = [pixels[pieces[i].pixel_rows[0]: pieces[i].pixel_rows[1]] for i in mine]
    return _encode_and_exchange(encode, stand_in, pixel_rows, [pieces[i].grid for i in mine], pieces, owners,
                                merge_area, width, needed_rows, rank, group)


@dataclass(frozen=True)
class RoundGroup:
    """One CP group of a round, as every rank of the round learns it (`encode_media_over_round`)."""

    first_rank: int
    """Its first rank in the round's process group; its members are the next `degree` ranks."""
    degree: int
    grids: tuple[tuple[int, int, int], ...]
    """(t, h, w) of each of its media, in the model's order (images first, then videos)."""

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


def _runs(rows: torch.Tensor) -> list[tuple[int, int]]:
    """`rows` (1-D int) as (start, length) runs of consecutive values, in order: a zigzag shard's visual rows are
    a few such runs."""
    runs: list[list[int]] = []
    for value in rows.tolist():
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


def round_media(groups: Sequence[RoundGroup], ranks: int) -> RoundMedia:
    """The round's media cut for its `ranks` ranks (`media_pieces`) and assigned (`assign_over_round`)."""
    items: list[MediaItem] = []
    group_of_item: list[int] = []
    start = 0
    for index, group in enumerate(groups):
        grids = torch.tensor(group.grids, dtype=torch.int64).reshape(-1, 3)
        for item in media_items(None, grids):
            items.append(MediaItem(item.grid, (start + item.pixel_rows[0], start + item.pixel_rows[1])))
            group_of_item.append(index)
        start += group.patches
    pieces = media_pieces(items, ranks)
    starts = [item.pixel_rows[0] for item in items]
    group_of = tuple(group_of_item[bisect.bisect_right(starts, piece.pixel_rows[0]) - 1] for piece in pieces)
    owners = assign_over_round(pieces, [groups[g].ranks for g in group_of], ranks)
    return RoundMedia(tuple(groups), tuple(pieces), group_of, tuple(owners))


def _pixels_from_other_groups(media: RoundMedia, pixels: torch.Tensor | None, my_group: int, round_rank: int,
                              pixel_width: int, dtype: torch.dtype, round_group: dist.ProcessGroup
                              ) -> dict[int, torch.Tensor]:
    """`{piece: [patches, pixel_width]}`: the pixels of the pieces this rank encodes for other groups. An
    all-to-all of all the round's ranks: each piece encoded elsewhere is sent by its `pixel_source`."""
    moved = media.moved
    sends = [[i for i in moved if media.owners[i] == dest and media.pixel_source(i) == round_rank]
             for dest in range(dist.get_world_size(round_group))]
    receives = [i for i in moved if media.owners[i] == round_rank]
    offset = media.offset(my_group)
    device = pixels.device if pixels is not None else collective_device(round_group)
    send = torch.cat([pixels[media.pieces[i].pixel_rows[0] - offset: media.pieces[i].pixel_rows[1] - offset]
                      for dest in sends for i in dest] or [torch.zeros(0, pixel_width, dtype=dtype, device=device)])
    send_counts = [sum(media.pieces[i].patches for i in dest) for dest in sends]
    recv_counts = [0] * len(sends)
    for index in receives:
        recv_counts[media.pixel_source(index)] += media.pieces[index].patches
    with torch.no_grad():
        received, _ = all_to_all_rows(send.to(dtype), send_counts, recv_counts, round_group)
    # [sum(recv_counts), pixel_width], grouped by source rank, each source's pieces in piece order.
    cursor = [sum(recv_counts[:r]) for r in range(len(sends))]
    out = {}
    for index in receives:
        source = media.pixel_source(index)
        out[index] = received[cursor[source]: cursor[source] + media.pieces[index].patches]
        cursor[source] += media.pieces[index].patches
    return out


def encode_media_over_round(encode: Any, stand_in: Any, pixels: torch.Tensor | None, items: Sequence[MediaItem],
                            merge_area: int, width: int, needed_rows: Sequence[torch.Tensor], rank_in_group: int,
                            group_first_rank: int, round_rank: int, round_group: dist.ProcessGroup,
                            pixel_width: int, log: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """As `encode_media_in_group`, but the media of every group of the round are encoded by all the round's ranks
    (`vision_phases`: a round whose plan says `vision_over_round`).

    Every rank passes its own group's `items`, `pixels` (`[patches, pixel_width]`) and `needed_rows` (one entry
    per member, indices into the group's feature rows). Two all-gathers over `round_group` tell every rank every
    group's media and every rank's needed rows (as runs, `_gather_round`); the round's media are cut for all its ranks and
    assigned (`round_media`); a piece encoded outside its group gets its pixels from one member of its group, and
    one all-to-all sends every rank the rows its shard needs (`_encode_and_exchange`). `round_rank`: this rank in
    `round_group`."""
    ranks = dist.get_world_size(round_group)
    pixel_dtype = None if pixels is None else pixels.dtype
    gathered = _gather_round(RoundGroup(group_first_rank, len(needed_rows),
                                        tuple(tuple(int(v) for v in item.grid) for item in items)),
                             _runs(needed_rows[rank_in_group]), pixel_dtype, round_group)
    dtypes = {dtype for _, _, dtype in gathered if dtype is not None}
    if len(dtypes) > 1:
        raise ValueError(f"the round's pixel values come in several dtypes ({sorted(map(str, dtypes))})")
    groups = sorted({group for group, _, _ in gathered}, key=lambda g: g.first_rank)
    index_of = {group.first_rank: index for index, group in enumerate(groups)}
    media = round_media(groups, ranks)
    # Every rank's needed rows, as indices into the round's feature rows.
    needed = [_rows_of(runs, media.offset(index_of[group.first_rank], merge_area)) for group, runs, _ in gathered]
    if log and round_rank == 0:
        logger.info("FCP vision: the round's %d media of %d patches encoded over its %d ranks as %d pieces, %d patches "
                    "outside their group", sum(len(g.grids) for g in groups), sum(g.patches for g in groups), ranks,
                    len(media.pieces), sum(media.pieces[i].patches for i in media.moved))
    my_group = index_of[group_first_rank]
    received: dict[int, torch.Tensor] = {}
    if media.moved:  # the same answer on every rank: all take part in the pixel exchange
        dtype = next(iter(dtypes)) if dtypes else torch.float32
        received = _pixels_from_other_groups(media, pixels, my_group, round_rank, pixel_width, dtype, round_group)
    encoded = [i for i, owner in enumerate(media.owners) if owner == round_rank]
    offset = media.offset(my_group)
    pixel_rows = [received[i] if i in received else
                  pixels[media.pieces[i].pixel_rows[0] - offset: media.pieces[i].pixel_rows[1] - offset]
                  for i in encoded]
    return _encode_and_exchange(encode, stand_in, pixel_rows, [media.pieces[i].grid for i in encoded],
                                media.pieces, media.owners, merge_area, width, needed, round_rank, round_group)


_PIXEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _gather_round(group: RoundGroup, runs: Sequence[tuple[int, int]], pixel_dtype: torch.dtype | None,
                  round_group: dist.ProcessGroup) -> list[tuple[RoundGroup, list[tuple[int, int]], torch.dtype | None]]:
    """Every rank's (group, needed-row runs, pixel dtype), in rank order: two all-gathers of int64 tensors (their
    lengths, then the padded records) instead of pickled objects."""
    if pixel_dtype is not None and pixel_dtype not in _PIXEL_DTYPES:
        raise ValueError(f"pixel values of dtype {pixel_dtype} cannot be exchanged; expected one of {_PIXEL_DTYPES}")
    record = [group.first_rank, group.degree, len(group.grids), *(v for grid in group.grids for v in grid),
              len(runs), *(v for run in runs for v in run),
              -1 if pixel_dtype is None else _PIXEL_DTYPES.index(pixel_dtype)]
    device = collective_device(round_group)
    ranks = dist.get_world_size(round_group)
    length = torch.tensor([len(record)], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _ in range(ranks)]
    dist.all_gather(lengths, length, group=round_group)
    longest = max(int(n) for n in lengths)
    padded = torch.zeros(longest, dtype=torch.int64, device=device)
    padded[: len(record)] = torch.tensor(record, dtype=torch.int64)
    records = [torch.zeros_like(padded) for _ in range(ranks)]
    dist.all_gather(records, padded, group=round_group)  # ranks x [longest]
    out = []
    for values in (r.tolist() for r in records):
        first, degree, count = values[:3]
        grids = tuple(tuple(values[3 + 3 * k: 6 + 3 * k]) for k in range(count))
        at = 3 + 3 * count
        run_values = values[at + 1: at + 1 + 2 * values[at]]
        code = values[at + 1 + 2 * values[at]]
        out.append((RoundGroup(first, degree, grids), list(zip(run_values[::2], run_values[1::2])),
                    None if code < 0 else _PIXEL_DTYPES[code]))
    return out
