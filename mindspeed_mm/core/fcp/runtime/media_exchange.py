"""The vision tower of a round split over its ranks: each medium (or piece of one) encoded once, and each rank
receives only the feature rows its own zigzag shard needs.

The media are cut and assigned by `media_pieces`; each rank encodes its pieces in one call of the tower. Every
rank knows every member's shard, so one uneven all-to-all (`parallel.row_exchange`) sends each rank the rows of
the visual tokens in its shard, from the ranks that encoded them: no rank holds the features of the whole group.
The exchange is differentiable: its backward pass is the reverse all-to-all, and each encoded row gets the sum of
its gradients from the ranks using it. The tower runs exactly once per round on every rank (under FSDP2 every call
is a collective of all ranks): a rank without media encodes a stand-in weighted 0 (`VisionTower.stand_in`).

Three cases (`shard_vision_rows`): a group of one rank encodes all its media; a group of several splits them over
its members (`encode_media_in_group`); a round whose plan says `vision_over_round` spreads the media of all its
groups over all its ranks (`encode_media_over_round`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.collectives import all_to_all_rows
from mindspeed_mm.core.fcp.parallel.device import collective_device
from mindspeed_mm.core.fcp.parallel.row_exchange import exchange_rows
from mindspeed_mm.core.fcp.runtime.media_pieces import (
    MediaItem, RoundGroup, RoundMedia, assign_media, media_pieces, round_media,
)
from mindspeed_mm.core.fcp.runtime.round_shard import RoundShard
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRuntime

logger = logging.getLogger(__name__)

PixelRows = Callable[[int, int], torch.Tensor]
"""`(start, stop)` -> `[stop - start, pixel_width]` rows of a group's concatenated pixel values."""


@dataclass(frozen=True)
class VisionTower:
    """What the round machinery needs of a model's vision tower (the model adapter builds it)."""

    encode: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """`(pixels [patches, pixel_width], grids [n, 3])` -> `[patches / merge_area, row_width]` rows, in order."""
    stand_in: Callable[[], torch.Tensor]
    """A call of the tower on a stand-in input, as a zero-valued scalar (keeps a rank without media in step)."""
    merge_area: int
    """Patches per feature row (LLM token)."""
    row_width: int
    """Values per feature row."""
    pixel_width: int
    """Values per patch row of the pixel input."""
    frame_groups_independent: bool = True
    """A range of a video's frame groups encodes as a video of its own would (long videos may be cut)."""


def pixel_slices(pixels: torch.Tensor | None) -> PixelRows:
    """Row ranges of a group's concatenated pixel values held by this rank."""
    def rows(start: int, stop: int) -> torch.Tensor:
        assert pixels is not None
        return pixels[start:stop]
    return rows


def _row_owners(items: Sequence[MediaItem], owners: Sequence[int], merge_area: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """For every feature row of the round (items' order): `[rows]` the rank encoding it and `[rows]` its index
    among that rank's encoded rows (a rank encodes its items in increasing item order)."""
    member_of, local_of, next_local = [], [], [0] * (max(owners) + 1 if owners else 0)
    for item, owner in zip(items, owners):
        rows = item.patches // merge_area
        member_of.append(torch.full((rows,), owner, dtype=torch.int64))
        local_of.append(torch.arange(next_local[owner], next_local[owner] + rows))
        next_local[owner] += rows
    if not member_of:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    return torch.cat(member_of), torch.cat(local_of)


def _encode_and_exchange(tower: VisionTower, local_pixels: list[torch.Tensor], local_grids: list[torch.Tensor],
                         pieces: Sequence[MediaItem], owners: Sequence[int], needed_rows: Sequence[torch.Tensor],
                         rank: int, group: dist.ProcessGroup) -> tuple[torch.Tensor, torch.Tensor | None]:
    """This rank encodes its pieces (`local_pixels` / `local_grids`, in piece order) in one call, then one uneven
    all-to-all over `group` sends every rank m the rows `needed_rows[m]` (indices into all pieces' rows) in m's
    order. Returns this rank's `[len(needed_rows[rank]), row_width]` rows and the anchor of a stand-in call (or
    None)."""
    anchor = None
    if local_pixels:
        local = tower.encode(torch.cat(local_pixels), torch.stack(local_grids))
    else:
        anchor = tower.stand_in()
        # Tied to the anchor, so that this rank's backward pass joins the exchange like the others'.
        local = anchor.new_zeros(0, tower.row_width) + anchor
    member_of, local_of = _row_owners(pieces, owners, tower.merge_area)
    # To each rank m, in rank order: the rows m needs that this rank encoded, in m's order.
    sends = [local_of[wanted[member_of[wanted] == rank]] for wanted in needed_rows]
    wanted = needed_rows[rank]
    sources = member_of[wanted]
    recv_counts = [int((sources == member).sum()) for member in range(len(needed_rows))]
    send = local[torch.cat(sends).to(local.device)]  # [sum(send counts), row_width]
    received = exchange_rows(send, [int(s.numel()) for s in sends], recv_counts, group)  # [len(wanted), row_width]
    # Back to the wanted order: the received rows come grouped by source rank, each group in wanted order.
    by_source = torch.cat([torch.nonzero(sources == member).reshape(-1) for member in range(len(needed_rows))])
    order = torch.empty_like(by_source)
    order[by_source] = torch.arange(by_source.numel())
    return received[order.to(received.device)], anchor


def encode_media_in_group(tower: VisionTower, pixels: PixelRows, items: Sequence[MediaItem],
                          needed_rows: Sequence[torch.Tensor], rank: int, group: dist.ProcessGroup,
                          log: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`[len(needed_rows[rank]), row_width]` vision rows of the group's feature rows `needed_rows[rank]` (indices
    into all items' rows, in the order wanted), and the zero-valued anchor of a stand-in call (or None).

    `needed_rows[m]`: the rows member m's shard needs (every rank passes the same list, one entry per member);
    `pixels(start, stop)`: rows of the group's pixels (only those of this rank's pieces are asked for). `log`: the
    group's first member logs the videos it cut."""
    degree = len(needed_rows)
    pieces = media_pieces(items, degree, tower.frame_groups_independent)
    if log and rank == 0 and len(pieces) > len(items):
        logger.info("FCP vision: %d media of %d patches encoded as %d pieces over %d members (long videos cut into "
                    "frame-group ranges)", len(items), sum(item.patches for item in items), len(pieces), degree)
    owners = assign_media([piece.patches for piece in pieces], degree)
    mine = [i for i, owner in enumerate(owners) if owner == rank]
    return _encode_and_exchange(tower, [pixels(*pieces[i].pixel_rows) for i in mine],
                                [pieces[i].grid for i in mine], pieces, owners, needed_rows, rank, group)


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


def _pixels_from_other_groups(media: RoundMedia, pixels: PixelRows, my_group: int, round_rank: int,
                              pixel_width: int, dtype: torch.dtype, round_group: dist.ProcessGroup
                              ) -> dict[int, torch.Tensor]:
    """`{piece: [patches, pixel_width]}`: the pixels of the pieces this rank encodes for other groups. An
    all-to-all of all the round's ranks: each piece encoded elsewhere is sent by its `pixel_source`."""
    moved = media.moved
    sends = [[i for i in moved if media.owners[i] == dest and media.pixel_source(i) == round_rank]
             for dest in range(dist.get_world_size(round_group))]
    receives = [i for i in moved if media.owners[i] == round_rank]
    offset = media.offset(my_group)
    parts = [pixels(media.pieces[i].pixel_rows[0] - offset, media.pieces[i].pixel_rows[1] - offset)
             for dest in sends for i in dest]
    send = torch.cat(parts) if parts else torch.zeros(0, pixel_width, dtype=dtype,
                                                      device=collective_device(round_group))
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


def encode_media_over_round(tower: VisionTower, pixels: PixelRows, pixel_dtype: torch.dtype | None,
                            items: Sequence[MediaItem], needed_rows: Sequence[torch.Tensor], rank_in_group: int,
                            group_first_rank: int, round_rank: int, round_group: dist.ProcessGroup,
                            log: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """As `encode_media_in_group`, but the media of every group of the round are encoded by all the round's ranks.

    Every rank passes its own group's `items`, `pixels` (dtype `pixel_dtype`, None without media) and
    `needed_rows` (one entry per member, indices into the group's feature rows). Two all-gathers over
    `round_group` tell every rank every group's media and every rank's needed rows (as runs, `_gather_round`);
    the round's media are cut for all its ranks and assigned (`round_media`); a piece encoded outside its group
    gets its pixels from one member of its group, and one all-to-all sends every rank the rows its shard needs.
    `round_rank`: this rank in `round_group`."""
    ranks = dist.get_world_size(round_group)
    gathered = _gather_round(RoundGroup(group_first_rank, len(needed_rows),
                                        tuple(tuple(int(v) for v in item.grid) for item in items)),
                             _runs(needed_rows[rank_in_group]), pixel_dtype, round_group)
    dtypes = {dtype for _, _, dtype in gathered if dtype is not None}
    if len(dtypes) > 1:
        raise ValueError(f"the round's pixel values come in several dtypes ({sorted(map(str, dtypes))})")
    groups = sorted({group for group, _, _ in gathered}, key=lambda g: g.first_rank)
    index_of = {group.first_rank: index for index, group in enumerate(groups)}
    media = round_media(groups, ranks, tower.frame_groups_independent)
    # Every rank's needed rows, as indices into the round's feature rows.
    needed = [_rows_of(runs, media.offset(index_of[group.first_rank], tower.merge_area))
              for group, runs, _ in gathered]
    if log and round_rank == 0:
        logger.info("FCP vision: the round's %d media of %d patches encoded over its %d ranks as %d pieces, %d patches "
                    "outside their group", sum(len(g.grids) for g in groups), sum(g.patches for g in groups), ranks,
                    len(media.pieces), sum(media.pieces[i].patches for i in media.moved))
    my_group = index_of[group_first_rank]
    received: dict[int, torch.Tensor] = {}
    if media.moved:  # the same answer on every rank: all take part in the pixel exchange
        dtype = next(iter(dtypes)) if dtypes else torch.float32
        received = _pixels_from_other_groups(media, pixels, my_group, round_rank, tower.pixel_width, dtype,
                                             round_group)
    encoded = [i for i, owner in enumerate(media.owners) if owner == round_rank]
    offset = media.offset(my_group)
    pixel_rows = [received[i] if i in received else
                  pixels(media.pieces[i].pixel_rows[0] - offset, media.pieces[i].pixel_rows[1] - offset)
                  for i in encoded]
    return _encode_and_exchange(tower, pixel_rows, [media.pieces[i].grid for i in encoded], media.pieces,
                                media.owners, needed, round_rank, round_group)


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


def encode_all(tower: VisionTower, pixels: PixelRows, items: Sequence[MediaItem]
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """All the items' rows on this rank alone, or, without media, no rows and the anchor of a stand-in call."""
    if items:
        return tower.encode(torch.cat([pixels(*item.pixel_rows) for item in items]),
                            torch.stack([item.grid for item in items])), None
    anchor = tower.stand_in()
    return anchor.new_zeros(0, tower.row_width), anchor


def shard_vision_rows(tower: VisionTower, pixels: torch.Tensor | None, items: Sequence[MediaItem],
                      feature_rows: torch.Tensor, shard: RoundShard, runtime: FCPRuntime
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`[visual tokens of this rank's shard, row_width]` vision rows, in shard order, and the zero-valued anchor of
    a stand-in call (or None): the group's media encoded alone, split over the group, or spread over the round as
    the plan says.

    `pixels`: `[patches, pixel_width]` the group's pixel values, items' order (None without media);
    `feature_rows`: `[tokens]` for each token of the group's packed sequence its row of the group's vision
    features, -1 for a text token."""
    fcp_round = shard.fcp_round

    def needed(member: int) -> torch.Tensor:
        rows = feature_rows[shard.member_index(member).to(feature_rows.device)].cpu()
        return rows[rows >= 0]

    rows_of = pixel_slices(pixels)
    log = runtime.settings.log_plan
    plane_group = runtime.plane_group() if fcp_round.vision_over_round else None
    if plane_group is not None:
        layout = runtime.require_layout()
        members = [needed(member) for member in range(fcp_round.degree)]
        return encode_media_over_round(tower, rows_of, None if pixels is None else pixels.dtype, items, members,
                                       fcp_round.rank_in_group, layout.plane.index(fcp_round.group_ranks[0]),
                                       layout.fcp_rank, plane_group, log=log)
    if shard.group is None:
        rows, anchor = encode_all(tower, rows_of, items)
        return rows[needed(fcp_round.rank_in_group).to(rows.device)], anchor
    members = [needed(member) for member in range(fcp_round.degree)]
    return encode_media_in_group(tower, rows_of, items, members, fcp_round.rank_in_group, shard.group, log=log)


__all__ = ["PixelRows", "VisionTower", "encode_all", "encode_media_in_group", "encode_media_over_round",
           "pixel_slices", "shard_vision_rows"]
