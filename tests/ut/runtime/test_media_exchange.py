"""The vision tower split over a CP group or a round: each medium encoded once, each rank receives exactly the rows
its shard needs, and rows and gradients equal encoding everything on every rank."""
from __future__ import annotations

from typing import Any

import torch

from distributed_utils import run_distributed
from mindspeed_mm.core.fcp.runtime.media_exchange import (
    VisionTower, encode_media_in_group, encode_media_over_round, pixel_slices,
)
from mindspeed_mm.core.fcp.runtime.media_pieces import assign_media, assign_over_round, media_items, media_pieces

MERGE_AREA = 4
WIDTH = 6


def test_media_go_largest_first_to_the_least_loaded_member() -> None:
    assert assign_media([8, 4, 4, 12, 4], 3) == [1, 2, 2, 0, 1]
    assert assign_media([], 2) == []
    assert assign_media([4], 3) == [0]


def _encoder(weight: torch.Tensor):
    """A stand-in vision tower: each patch row maps linearly, each merge block of 4 rows is summed."""
    def encode(pixels: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
        mapped = torch.tanh(pixels @ weight)
        return mapped.reshape(-1, MERGE_AREA, WIDTH).sum(1)
    return encode


def _tower(weight: torch.Tensor) -> VisionTower:
    def stand_in() -> torch.Tensor:
        return _encoder(weight)(torch.zeros(MERGE_AREA, 5), torch.tensor([[1, 2, 2]])).sum() * 0

    return VisionTower(encode=_encoder(weight), stand_in=stand_in, merge_area=MERGE_AREA, row_width=WIDTH,
                       pixel_width=5)


def test_long_videos_are_cut_into_frame_group_ranges_and_the_rest_stays_whole() -> None:
    # 4 + 8 + 48 patches over 3 members: a share is 20; the video (t = 6 frame groups of 2 x 4) holds 3 shares.
    items = media_items(torch.tensor([[1, 2, 2], [1, 2, 4]]), torch.tensor([[6, 2, 4]]))
    pieces = media_pieces(items, 3)
    assert [p.grid.tolist() for p in pieces] == [[1, 2, 2], [1, 2, 4], [2, 2, 4], [2, 2, 4], [2, 2, 4]]
    assert [p.pixel_rows for p in pieces] == [(0, 4), (4, 12), (12, 28), (28, 44), (44, 60)]
    # never more pieces than frame groups, and one member keeps everything whole
    assert [p.grid.tolist() for p in media_pieces(media_items(None, torch.tensor([[2, 4, 4]])), 8)] == [
        [1, 4, 4], [1, 4, 4]]
    assert media_pieces(items, 1) == items


def _split_and_full(rank: int, world_size: int, video_frames: int) -> dict[str, Any]:
    import torch.distributed as dist

    torch.manual_seed(0)
    image_grid = torch.tensor([[1, 2, 2], [1, 2, 4]])
    video_grid = torch.tensor([[video_frames, 2, 2]])
    items = media_items(image_grid, video_grid)
    pixels = torch.randn(sum(item.patches for item in items), 5)
    weight = torch.randn(5, WIDTH, requires_grad=True)
    upstream = torch.randn(sum(item.patches for item in items) // MERGE_AREA, WIDTH)
    # each member needs some rows (its shard's visual tokens), in an order of its own; the last member none
    total = upstream.shape[0]
    needed = [torch.arange(total)[torch.arange(total) % (world_size - 1) == m].flip(0) for m in range(world_size - 1)]
    needed.append(torch.zeros(0, dtype=torch.int64))

    rows, anchor = encode_media_in_group(_tower(weight), pixel_slices(pixels), items, needed, rank, dist.group.WORLD)
    mine = needed[rank]
    # a member without rows keeps the exchange's backward pass (a collective) in its graph, as the model does
    loss = (rows * upstream[mine]).sum() + rows.sum() * 0 + (anchor if anchor is not None else 0)
    loss.backward()
    split_grad = weight.grad.clone()
    dist.all_reduce(split_grad)
    weight.grad = None
    full = _encoder(weight)(pixels, torch.cat([image_grid, video_grid]))
    (full * upstream).sum().backward()
    return {"rows": rows.detach(), "full": full.detach()[mine], "split_grad": split_grad, "full_grad": weight.grad,
            "stand_in": anchor is not None}


def test_each_member_receives_only_its_rows_and_the_gradients_sum_exactly() -> None:
    # 3 media on 4 ranks (4 + 8 + 4 patches, none above a share): one member encodes nothing and runs the
    # stand-in; the last member needs no rows
    results = run_distributed(_split_and_full, 4, 1, timeout_s=300.0)
    assert [r["stand_in"] for r in results].count(True) == 1
    assert [r["rows"].shape[0] for r in results] == [2, 1, 1, 0]  # 4 rows over 3 members
    for result in results:
        assert torch.allclose(result["rows"], result["full"], atol=1e-6)
        assert torch.allclose(result["split_grad"], result["full_grad"], atol=1e-5)


def test_a_long_video_is_encoded_across_the_members_in_frame_group_ranges() -> None:
    # The video's 4 frame groups (16 patches) hold more than a share (28 / 4 = 7): cut in 3 ranges; with the two
    # images every member encodes a piece, and rows and gradients still equal encoding everything on each rank.
    results = run_distributed(_split_and_full, 4, 4, timeout_s=300.0)
    assert [r["stand_in"] for r in results].count(True) == 0
    for result in results:
        assert torch.allclose(result["rows"], result["full"], atol=1e-6)
        assert torch.allclose(result["split_grad"], result["full_grad"], atol=1e-5)


def test_a_round_media_go_to_their_own_group_up_to_the_round_share_then_anywhere() -> None:
    # 40 patches over 4 ranks (share 10): group 0 (ranks 0-1) holds four 8-patch video pieces and a 4-patch image,
    # group 1 (ranks 2-3) a 4-patch image. Two video pieces stay home, two go to group 1's ranks; the images stay.
    pieces = media_pieces(media_items(torch.tensor([[1, 2, 2]]), torch.tensor([[8, 2, 2]])), 4)
    pieces = pieces + media_items(torch.tensor([[1, 2, 2]]), None)
    home = [range(0, 2)] * 5 + [range(2, 4)]
    assert [p.patches for p in pieces] == [4, 8, 8, 8, 8, 4]
    assert assign_over_round(pieces, home, 4) == [0, 0, 1, 2, 3, 2]


def _round_split_and_full(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed as dist

    group_index, first = (0, 0) if rank < 2 else (1, 2)
    grids = ([torch.tensor([[1, 2, 2]]), torch.tensor([[8, 2, 2]])] if group_index == 0
             else [torch.tensor([[1, 2, 2]]), None])
    items = media_items(*grids)
    torch.manual_seed(100 + group_index)  # both members of a group hold its pixels
    pixels = torch.randn(sum(item.patches for item in items), 5)
    torch.manual_seed(0)
    weight = torch.randn(5, WIDTH, requires_grad=True)
    total = sum(item.patches for item in items) // MERGE_AREA
    upstream = torch.randn(total, WIDTH) + rank
    # each member of a group needs some of its group's rows, in an order of its own
    needed = [torch.arange(total)[torch.arange(total) % 2 == m].flip(0) for m in range(2)]
    if group_index == 1:
        needed = [torch.arange(total), torch.zeros(0, dtype=torch.int64)]

    rows, anchor = encode_media_over_round(_tower(weight), pixel_slices(pixels), pixels.dtype, items, needed,
                                           rank - first, first, rank, dist.group.WORLD)
    mine = needed[rank - first]
    loss = (rows * upstream[mine]).sum() + rows.sum() * 0 + (anchor if anchor is not None else 0)
    loss.backward()
    split_grad = weight.grad.clone()
    dist.all_reduce(split_grad)
    weight.grad = None
    full = _encoder(weight)(pixels, torch.cat([g for g in grids if g is not None]))
    (full[mine] * upstream[mine]).sum().backward()
    full_grad = weight.grad.clone()
    dist.all_reduce(full_grad)
    return {"rows": rows.detach(), "full": full.detach()[mine], "split_grad": split_grad, "full_grad": full_grad}


def test_a_round_encoded_over_all_its_ranks_gives_each_rank_its_rows_and_exact_gradients() -> None:
    # Two video pieces of group 0 are encoded by group 1's ranks (their pixels sent there, the rows sent back).
    results = run_distributed(_round_split_and_full, 4, timeout_s=300.0)
    assert [r["rows"].shape[0] for r in results] == [5, 4, 1, 0]  # group 0: 9 rows over 2; group 1: 1 row
    for result in results:
        assert torch.allclose(result["rows"], result["full"], atol=1e-6)
        assert torch.allclose(result["split_grad"], result["full_grad"], atol=1e-5)


def _round_with_a_bystander(rank: int, world_size: int) -> dict[str, Any]:
    """Three groups: ranks 0-1 hold a long video, rank 2 an image, rank 3 nothing; rank 3 neither sends nor
    receives pixels, yet takes part in the round's exchanges."""
    import torch.distributed as dist

    group_index, first, degree = {0: (0, 0, 2), 1: (0, 0, 2), 2: (1, 2, 1), 3: (2, 3, 1)}[rank]
    grids = {0: (None, torch.tensor([[6, 2, 2]])), 1: (torch.tensor([[1, 2, 2]]), None), 2: (None, None)}[group_index]
    items = media_items(*grids)
    torch.manual_seed(100 + group_index)
    pixels = torch.randn(sum(item.patches for item in items), 5) if items else None
    torch.manual_seed(0)
    weight = torch.randn(5, WIDTH, requires_grad=True)
    total = sum(item.patches for item in items) // MERGE_AREA
    needed = [torch.arange(total)[torch.arange(total) % degree == m] for m in range(degree)]

    rows, anchor = encode_media_over_round(_tower(weight), pixel_slices(pixels),
                                           None if pixels is None else pixels.dtype, items, needed, rank - first,
                                           first, rank, dist.group.WORLD)
    mine = needed[rank - first]
    loss = (rows * (1.0 + rank)).sum() + rows.sum() * 0 + (anchor if anchor is not None else 0)
    loss.backward()
    split_grad = weight.grad.clone()
    dist.all_reduce(split_grad)
    weight.grad = None
    if items:
        full = _encoder(weight)(pixels, torch.cat([g for g in grids if g is not None]))[mine]
        (full * (1.0 + rank)).sum().backward()
    else:
        full = torch.zeros(0, WIDTH)
    full_grad = torch.zeros_like(weight) if weight.grad is None else weight.grad.clone()
    dist.all_reduce(full_grad)
    return {"rows": rows.detach(), "full": full.detach(), "split_grad": split_grad, "full_grad": full_grad}


def test_every_rank_of_the_round_joins_its_exchanges_even_with_nothing_to_move() -> None:
    results = run_distributed(_round_with_a_bystander, 4, timeout_s=300.0)
    assert [r["rows"].shape[0] for r in results] == [3, 3, 1, 0]
    for result in results:
        assert torch.allclose(result["rows"], result["full"], atol=1e-6)
        assert torch.allclose(result["split_grad"], result["full_grad"], atol=1e-5)
