"""3D mRoPE: position ids of a sample by hand, Qwen3-VL's interleaving, sharded ids equal to the
unsharded sample's on every rank and degree (padding included), and the rotary angles built from them."""
from __future__ import annotations

import pytest
import torch

from mindspeed_mm.core.fcp.sandbox.run_config import DataConfig, VideoDataConfig, VisionConfig
from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.sandbox.shard_rotary import ShardRotaryEmbedding
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VideoCaptionDataset
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout, mrope_position_ids
from mindspeed_mm.core.fcp.sandbox.vision.mrope_sections import HEIGHT, TEMPORAL, WIDTH, interleaved_mrope_axes
from mindspeed_mm.core.fcp.sandbox.vision.shard_mrope import MRopePackedSeqParams, ShardMRotaryEmbedding
from mindspeed_mm.core.fcp.sandbox.vision.vlm_round_batch import build_vlm_shard_batch
from mindspeed_mm.core.fcp.parallel import zigzag_layout, zigzag_unshard

VISION = VisionConfig(num_layers=1, hidden_size=16, ffn_hidden_size=32, num_attention_heads=2)


def _dataset(video: VideoDataConfig, num_samples: int = 5) -> VideoCaptionDataset:
    return VideoCaptionDataset(DataConfig(dataset="openvid", seed=2), video, VISION, num_samples=num_samples,
                               seq_length=200, vocab_size=50, token_seed=3)


def test_position_ids_of_a_sample() -> None:
    layout = VideoSampleLayout(prompt_tokens=2, frame_groups=2, grid_rows=2, grid_cols=3, caption_tokens=3,
                               spatial_merge_size=2)
    vision = [(2 + g, 2 + r, 2 + c) for g in range(2) for r in range(2) for c in range(3)]
    # the caption continues from the largest vision id + 1 = 2 + max(2, 2, 3)
    expected = [(0, 0, 0), (1, 1, 1), *vision, (5, 5, 5), (6, 6, 6), (7, 7, 7)]
    assert mrope_position_ids(layout).tolist() == [list(p) for p in expected]


def test_qwen3vl_interleaving() -> None:
    axes = interleaved_mrope_axes((24, 20, 20))
    assert axes[:6] == (TEMPORAL, HEIGHT, WIDTH, TEMPORAL, HEIGHT, WIDTH)
    assert axes[57:] == (TEMPORAL, HEIGHT, WIDTH, TEMPORAL, TEMPORAL, TEMPORAL, TEMPORAL)
    assert (axes.count(TEMPORAL), axes.count(HEIGHT), axes.count(WIDTH)) == (24, 20, 20)
    with pytest.raises(ValueError, match="cannot be interleaved"):
        interleaved_mrope_axes((1, 6, 1))


@pytest.mark.parametrize(
    "video",
    [
        VideoDataConfig(),
        # five-token samples (one vision token): degree 6 pads the group with a loss-free document
        VideoDataConfig(frame_scale=1000, grid_scale=1000, text_scale=1000, min_caption_tokens=4, prompt_tokens=0),
    ],
)
def test_sharded_ids_are_the_unsharded_samples_ids(video: VideoDataConfig) -> None:
    dataset = _dataset(video)
    samples = [dataset[i] for i in range(len(dataset))]
    full_ids = torch.cat([s.mrope_position_ids for s in samples])
    full_vision = torch.cat([s.vision_mask for s in samples])
    total = full_ids.shape[0]
    for degree in (1, 2, 3, 4, 6):
        batches = [build_vlm_shard_batch(samples, rank_in_group=r, degree=degree, group=None, algo="ring")
                   for r in range(degree)]
        cu_seqlens = batches[0].packed_seq_params.cu_seqlens
        padding = int(cu_seqlens[-1]) - total
        assert padding == (2 * degree if max(s.length for s in samples) < degree else 0)
        expected_ids = torch.cat([full_ids, torch.arange(padding).unsqueeze(1).expand(-1, 3)])
        expected_vision = torch.cat([full_vision, torch.zeros(padding, dtype=torch.bool)])
        layout = zigzag_layout(cu_seqlens, degree)
        for rank, batch in enumerate(batches):
            index = layout.shard(rank).global_index
            assert torch.equal(batch.packed_seq_params.mrope_position_ids, expected_ids[index])
            # the exchange fills exactly the shard's vision tokens
            vision_rows = torch.nonzero(expected_vision[index]).reshape(-1)
            assert torch.equal(batch.vision_positions, vision_rows)
        shards = [b.packed_seq_params.mrope_position_ids for b in batches]
        assert torch.equal(zigzag_unshard(shards, cu_seqlens, degree), expected_ids)


def test_text_ids_give_plain_rope_and_each_frequency_follows_its_axis() -> None:
    head_dim, sections = 16, (4, 2, 2)
    mrope = ShardMRotaryEmbedding(head_dim, 10000, sections)
    positions = torch.tensor([0, 3, 7, 12])
    text_ids = positions.unsqueeze(1).expand(-1, 3)
    torch.testing.assert_close(mrope(text_ids), ShardRotaryEmbedding(head_dim, 10000)(positions))

    ids = torch.tensor([[5, 1, 9], [2, 4, 0]])
    angles = mrope(ids).squeeze(1)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    for j, axis in enumerate(interleaved_mrope_axes(sections)):
        torch.testing.assert_close(angles[:, j], ids[:, axis].float() * inv_freq[j])
        torch.testing.assert_close(angles[:, j + head_dim // 2], angles[:, j])


def test_rotary_reads_the_shard_ids_from_the_packed_params() -> None:
    mrope = ShardMRotaryEmbedding(16, 10000, (4, 2, 2))
    ids = torch.tensor([[1, 1, 1], [2, 3, 4]])
    params = MRopePackedSeqParams(cu_seqlens=torch.tensor([0, 2]), position_ids=torch.arange(2), mrope_position_ids=ids)
    assert torch.equal(mrope.get_rotary_seq_len(None, None, torch.zeros(2, 1, 8), None, params), ids)
    with pytest.raises(ValueError, match=r"must be \[3, 3\]"):
        mrope.get_rotary_seq_len(None, None, torch.zeros(3, 1, 8), None, params)
    with pytest.raises(ValueError, match="needs MRopePackedSeqParams"):
        text_params = FCPPackedSeqParams(position_ids=torch.arange(2))
        mrope.get_rotary_seq_len(None, None, torch.zeros(2, 1, 8), None, text_params)
    with pytest.raises(ValueError, match="must sum to kv_channels / 2"):
        ShardMRotaryEmbedding(16, 10000, (4, 4, 2))
