"""A CP group's videos as the product's media split sees them, on metadata: every frame group in exactly one item,
the feature rows are the vision tokens in packed order, every row goes to the one member whose shard holds its
token, and every piece of the split is whole frame groups of one sample."""
from __future__ import annotations

import pytest
import torch

from mindspeed_mm.core.fcp.runtime.media_pieces import assign_media, media_pieces
from mindspeed_mm.core.fcp.sandbox.vision.group_media import group_media
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout


def _layout(groups: int, rows: int, cols: int, prompt: int = 2, caption: int = 3) -> VideoSampleLayout:
    return VideoSampleLayout(prompt_tokens=prompt, frame_groups=groups, grid_rows=rows, grid_cols=cols,
                             caption_tokens=caption, spatial_merge_size=2)


LAYOUTS = [_layout(3, 2, 3), _layout(1, 1, 2), _layout(5, 2, 2), _layout(2, 3, 3, prompt=0), _layout(1, 1, 1)]
INDICES = [40, 41, 42, 43, 44]


def test_one_item_per_video_and_the_feature_rows_are_the_vision_tokens_in_packed_order() -> None:
    media = group_media(LAYOUTS, INDICES, 2)
    assert [item.patches for item in media.items] == [layout.vision_patches for layout in LAYOUTS]
    assert [item.grid.tolist() for item in media.items][0] == [3, 4, 6]
    assert all(a.pixel_rows[1] == b.pixel_rows[0] for a, b in zip(media.items, media.items[1:]))
    start = 0
    for layout in LAYOUTS:
        rows = media.feature_rows[start: start + layout.length]
        assert (rows[: layout.vision_start] == -1).all() and (rows[layout.caption_start:] == -1).all()
        assert rows[layout.vision_start: layout.caption_start].tolist() == list(
            range(int(rows.max()) - layout.vision_tokens + 1, int(rows.max()) + 1))
        start += layout.length
    with pytest.raises(ValueError, match="one sample index per layout"):
        group_media(LAYOUTS, INDICES[:2], 2)


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 6])
def test_every_row_goes_to_the_member_whose_shard_holds_its_token(degree: int) -> None:
    media = group_media(LAYOUTS, INDICES, degree)
    needed = torch.cat([media.needed_rows(member) for member in range(degree)])
    assert sorted(needed.tolist()) == list(range(sum(layout.vision_tokens for layout in LAYOUTS)))
    for member in range(degree):
        shard = media.zigzag.shard(member).global_index
        positions = media.vision_positions(member)
        assert torch.equal(media.feature_rows[shard[positions]], media.needed_rows(member))


@pytest.mark.parametrize("degree", [1, 2, 3, 5, 16])
def test_the_split_is_the_products_and_its_pieces_are_whole_frame_groups(degree: int) -> None:
    media = group_media(LAYOUTS, INDICES, degree)
    pieces = media_pieces(media.items, degree)
    loads = media.member_patches
    assert sum(loads) == sum(layout.vision_patches for layout in LAYOUTS)
    assert max(loads) <= sum(loads) / degree + max(piece.patches for piece in pieces)
    owners = assign_media([piece.patches for piece in pieces], degree)
    assert loads == [sum(p.patches for p, o in zip(pieces, owners) if o == member) for member in range(degree)]
    covered = [group for piece in pieces for group in media.frame_groups(*piece.pixel_rows)]
    assert covered == [(i, g) for i, layout in zip(INDICES, LAYOUTS) for g in range(layout.frame_groups)]
    with pytest.raises(ValueError, match="not whole frame groups"):
        media.frame_groups(0, 5)
