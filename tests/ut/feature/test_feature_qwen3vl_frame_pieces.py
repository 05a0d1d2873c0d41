"""Why a long video may be encoded in pieces: Hugging Face's Qwen3-VL vision model (which MindSpeed-MM's Qwen3-VL
forks) gives a range of a video's frame groups, encoded as a video of its own, exactly the rows the whole video
gives those frame groups, deepstack features included (the split FCP makes, `media_pieces`), which the
Qwen3-VL adapter declares (`VisionTower.frame_groups_independent`)."""
from __future__ import annotations

import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from mindspeed_mm.core.fcp.runtime.media_pieces import media_items, media_pieces


def test_frame_group_ranges_encode_to_the_whole_videos_rows() -> None:
    torch.manual_seed(0)
    config = Qwen3VLVisionConfig(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3,
                                 patch_size=2, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=24,
                                 num_position_embeddings=64, deepstack_visual_indexes=[0])
    config._attn_implementation = "sdpa"
    model = Qwen3VLVisionModel(config).eval()
    grid = torch.tensor([[5, 4, 6]])                     # 5 frame groups of 4 x 6 patches
    pixels = torch.randn(int(grid.prod()), 3 * 2 * 2 * 2)
    with torch.no_grad():
        whole, whole_deepstack = model(pixels, grid_thw=grid)
        pieces = media_pieces(media_items(None, grid), 3)
        assert [p.grid.tolist() for p in pieces] == [[1, 4, 6], [2, 4, 6], [2, 4, 6]]
        outputs = [model(pixels[p.pixel_rows[0]:p.pixel_rows[1]], grid_thw=p.grid.unsqueeze(0)) for p in pieces]
    torch.testing.assert_close(torch.cat([rows for rows, _ in outputs]), whole, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.cat([deep[0] for _, deep in outputs]), whole_deepstack[0], rtol=1e-5, atol=1e-6)
