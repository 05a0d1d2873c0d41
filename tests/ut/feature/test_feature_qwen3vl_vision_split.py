"""The vision tower split over a CP group: each medium encoded once, each member receives exactly the rows its
shard needs, and rows and gradients equal encoding everything on every rank."""
from __future__ import annotations

from typing import Any

import torch

from distributed_utils import run_distributed
from mindspeed_mm.features_manager.fcp.qwen3vl.vision_split import (
    assign_media, encode_media_in_group, media_items, media_pieces,
)

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

    def stand_in() -> torch.Tensor:
        return _encoder(weight)(torch.zeros(MERGE_AREA, 5), torch.tensor([[1, 2, 2]])).sum() * 0

    rows, anchor = encode_media_in_group(_encoder(weight), stand_in, pixels, items, MERGE_AREA, WIDTH, needed,
                                         rank, dist.group.WORLD)
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
