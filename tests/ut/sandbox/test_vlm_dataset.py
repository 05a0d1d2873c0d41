"""Video-caption dataset: metadata matches what is loaded, samples are deterministic per index, patches
are cut in merge-window order, over-long clips keep the frame groups that fit."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from mindspeed_mm.core.fcp.sandbox.run_config import DataConfig, VideoDataConfig, VisionConfig
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VISION_TOKEN_ID, VideoCaptionDataset, patchify_frames
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout, patch_grid_positions

VISION = VisionConfig(num_layers=1, hidden_size=16, ffn_hidden_size=32, num_attention_heads=2, patch_size=2)
VIDEO = VideoDataConfig(frame_scale=4, grid_scale=8, text_scale=16, min_caption_tokens=2, prompt_tokens=3)
DATA = DataConfig(dataset="openvid", seed=3)


def _dataset(num_samples: int = 12, seq_length: int = 128, video: VideoDataConfig = VIDEO) -> VideoCaptionDataset:
    return VideoCaptionDataset(DATA, video, VISION, num_samples=num_samples, seq_length=seq_length, vocab_size=64,
                               token_seed=5)


def test_metadata_matches_the_loaded_samples() -> None:
    dataset = _dataset()
    for index in range(len(dataset)):
        sample, layout = dataset[index], dataset.layout(index)
        assert sample.length == layout.length == dataset.lengths[index]
        assert float(sample.loss_mask.sum()) == dataset.loss_tokens[index] == layout.caption_tokens + 1
        assert int(sample.vision_mask.sum()) == layout.vision_tokens
        assert torch.all(sample.tokens[sample.vision_mask] == VISION_TOKEN_ID)
        assert torch.all(sample.tokens[~sample.vision_mask] != VISION_TOKEN_ID)
        # next-token labels, loss from the last vision token on (it predicts the first caption token)
        assert torch.equal(sample.labels[:-1], sample.tokens[1:])
        assert sample.loss_mask[layout.caption_start - 2] == 0 and sample.loss_mask[layout.caption_start - 1] == 1
        patches = [dataset.frame_group(index, g) for g in range(layout.frame_groups)]
        assert sum(p.shape[0] for p in patches) == dataset.vision_patches[index] == layout.vision_patches
        assert all(p.shape == (layout.patches_per_group, VISION.patch_dim) for p in patches)


def test_samples_depend_only_on_seed_and_index() -> None:
    short, long = _dataset(num_samples=6), _dataset(num_samples=20)
    np.testing.assert_array_equal(short.lengths, long.lengths[:6])
    np.testing.assert_array_equal(short.vision_patches, long.vision_patches[:6])
    for index in range(6):
        assert torch.equal(short[index].tokens, long[index].tokens)
        torch.testing.assert_close(short.frame_group(index, 0), long.frame_group(index, 0), rtol=0, atol=0)
    index = next((i for i in range(20) if long.layout(i).frame_groups > 1), None)
    assert index is not None, "the sample set should hold a clip with several frame groups"
    assert not torch.equal(long.frame_group(index, 0), long.frame_group(index, 1))


def test_scaled_metadata_follows_the_video_options() -> None:
    coarse = _dataset(video=VideoDataConfig(frame_scale=1000, grid_scale=1000, text_scale=1000, min_caption_tokens=4,
                                            prompt_tokens=0))
    for index in range(len(coarse)):
        layout = coarse.layout(index)
        assert (layout.frame_groups, layout.grid_rows, layout.grid_cols, layout.caption_tokens) == (1, 1, 1, 4)
        assert layout.vision_patches == 4 and layout.length == 5


def test_patches_are_cut_in_merge_window_order() -> None:
    merge, patch, rows, cols = 2, 3, 2, 3
    height, width = rows * merge * patch, cols * merge * patch
    # pixel value encodes (time, channel, y, x)
    t, c, y, x = torch.meshgrid(
        torch.arange(2), torch.arange(3), torch.arange(height), torch.arange(width), indexing="ij"
    )
    frames = (t * 1_000_000 + c * 10_000 + y * 100 + x).to(torch.float64)
    patches = patchify_frames(frames, merge, patch)
    patch_rows, patch_cols = patch_grid_positions(rows, cols, merge)
    assert patches.shape == (rows * cols * merge * merge, 3 * 2 * patch * patch)
    for i in range(patches.shape[0]):
        block = frames[:, :, patch_rows[i] * patch : (patch_rows[i] + 1) * patch,
                       patch_cols[i] * patch : (patch_cols[i] + 1) * patch]
        torch.testing.assert_close(patches[i], block.permute(1, 0, 2, 3).reshape(-1), rtol=0, atol=0)
    # merge^2 consecutive patches form one merged token: a 2x2 window of the patch grid
    assert patch_rows[:4].tolist() == [0, 0, 1, 1] and patch_cols[:4].tolist() == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="multiple of merge x patch = 6 pixels"):
        patchify_frames(frames[:, :, :5], merge, patch)


def test_long_clips_keep_the_frame_groups_that_fit(caplog: pytest.LogCaptureFixture) -> None:
    full = _dataset(num_samples=40, seq_length=1000)
    with caplog.at_level(logging.INFO):
        cut = _dataset(num_samples=40, seq_length=48)
    assert "keep only the frame groups that fit seq_length=48" in caplog.text
    assert cut.lengths.max() <= 48
    shortened = [i for i in range(40) if cut.layout(i).frame_groups < full.layout(i).frame_groups]
    assert shortened, "some clip should have been cut"
    for i in range(40):
        assert cut.layout(i).frame_groups >= 1
        assert cut.layout(i).caption_tokens == full.layout(i).caption_tokens


def test_a_sample_that_cannot_fit_one_frame_group_is_named() -> None:
    with pytest.raises(ValueError, match=r"video sample 0: .* exceed gpt_args\.seq_length=8"):
        _dataset(seq_length=8)


def test_bad_indices_are_rejected() -> None:
    dataset = _dataset(num_samples=4)
    with pytest.raises(IndexError, match="outside 0..3"):
        dataset[4]
    with pytest.raises(IndexError, match="frame groups 0.."):
        dataset.frame_group(0, dataset.layout(0).frame_groups)


def test_layout_rejects_empty_parts() -> None:
    with pytest.raises(ValueError, match="grid_rows must be >= 1"):
        VideoSampleLayout(prompt_tokens=1, frame_groups=1, grid_rows=0, grid_cols=1, caption_tokens=1,
                          spatial_merge_size=2)
