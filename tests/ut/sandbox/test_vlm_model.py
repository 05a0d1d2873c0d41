"""The tiny VLM on one process: vision attention stays inside each frame group, a packed round (FCP
path at degree 1) matches the samples run one by one through the reference, mRoPE ids are in effect."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch

from mindspeed_mm.core.fcp.sandbox.run_config import DataConfig, ModelConfig, VideoDataConfig, VisionConfig
from mindspeed_mm.core.fcp.sandbox.distributed import init_distributed, shutdown_distributed
from mindspeed_mm.core.fcp.sandbox.reference_training import ReferenceCoreAttention
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VideoCaptionDataset
from mindspeed_mm.core.fcp.sandbox.vision.encoder import FrameBatch
from mindspeed_mm.core.fcp.sandbox.vision.vlm_model import build_vlm_model
from mindspeed_mm.core.fcp.sandbox.vision.vlm_reference import sample_token_losses
from mindspeed_mm.core.fcp.sandbox.vision.vlm_round_batch import build_vlm_shard_batch

MODEL = ModelConfig(num_layers=2, hidden_size=32, ffn_hidden_size=48, num_attention_heads=4, num_query_groups=2,
                    vocab_size=64, seq_length=96)
VISION = VisionConfig(num_layers=2, hidden_size=16, ffn_hidden_size=32, num_attention_heads=2)
VIDEO = VideoDataConfig(frame_scale=3, grid_scale=10, text_scale=20)


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    """A one-process gloo world with megatron-core's TP = PP = 1 state."""
    init_distributed(force_cpu=True)
    yield
    shutdown_distributed()


@pytest.fixture(scope="module")
def dataset() -> VideoCaptionDataset:
    return VideoCaptionDataset(DataConfig(dataset="openvid", seed=4), VIDEO, VISION, num_samples=6,
                               seq_length=MODEL.seq_length, vocab_size=MODEL.vocab_size, token_seed=8)


def _frames(dataset: VideoCaptionDataset, index: int, groups: range) -> FrameBatch:
    layout = dataset.layout(index)
    return FrameBatch.from_frame_groups([dataset.frame_group(index, g) for g in groups], [layout] * len(groups))


def test_vision_attention_stays_inside_each_frame_group(one_rank: None, dataset: VideoCaptionDataset) -> None:
    index = next(i for i in range(len(dataset)) if dataset.layout(i).frame_groups >= 2)
    layout = dataset.layout(index)
    model = build_vlm_model(MODEL, VISION, seed=3)
    together = model.encode(_frames(dataset, index, range(layout.frame_groups)))
    assert together.shape == (layout.vision_tokens, MODEL.hidden_size)
    apart = torch.cat([model.encode(_frames(dataset, index, range(g, g + 1))) for g in range(layout.frame_groups)])
    torch.testing.assert_close(apart, together)
    # one window over all frame groups attends across them and gives other tokens
    frames = _frames(dataset, index, range(layout.frame_groups))
    joined = model.encode(dataclasses.replace(frames, windows=(sum(frames.windows),)))
    assert float((joined - together).detach().norm()) > 1e-4 * float(together.detach().norm())


def _packed_round(model: torch.nn.Module, dataset: VideoCaptionDataset, indices: list[int]) -> torch.Tensor:
    """Masked token losses of the samples packed into one degree-1 round (the FCP path, no group)."""
    batch = build_vlm_shard_batch([dataset[i] for i in indices], rank_in_group=0, degree=1, group=None, algo="ring")
    pixels = torch.cat([dataset.frame_group(i, g) for i in indices for g in range(dataset.layout(i).frame_groups)])
    grids = torch.stack([item.grid for item in batch.media.items])
    rows = model.encode(FrameBatch.from_grids(pixels, grids, VISION.spatial_merge_size))
    vision_tokens = rows[batch.needed_rows[0]]
    losses = model(batch.tokens, batch.labels, vision_tokens, batch.vision_positions, batch.packed_seq_params)
    return losses.reshape(-1) * batch.loss_mask


def test_packed_round_matches_samples_one_by_one(one_rank: None, dataset: VideoCaptionDataset) -> None:
    indices = [0, 1, 2, 3]
    packed_model = build_vlm_model(MODEL, VISION, seed=5)
    reference_model = build_vlm_model(MODEL, VISION, seed=5, core_attention=ReferenceCoreAttention)
    packed = _packed_round(packed_model, dataset, indices)
    expected = torch.cat([sample_token_losses(reference_model, dataset, i) for i in indices])
    torch.testing.assert_close(packed, expected)
    packed.sum().backward()
    expected.sum().backward()
    reference_grads = dict(reference_model.named_parameters())
    names = [name for name, _ in packed_model.named_parameters()]
    assert any(n.startswith("vision.") for n in names) and any(n.startswith("decoder.") for n in names)
    for name, param in packed_model.named_parameters():
        assert param.grad is not None and float(param.grad.abs().sum()) > 0, name
        torch.testing.assert_close(param.grad, reference_grads[name].grad, msg=name)


def test_mrope_ids_are_in_effect(one_rank: None, dataset: VideoCaptionDataset) -> None:
    model = build_vlm_model(MODEL, VISION, seed=5)
    sample = dataset[0]
    layout = sample.layout
    vision = model.encode(_frames(dataset, 0, range(layout.frame_groups)))
    positions = torch.arange(layout.vision_start, layout.caption_start)
    batch = build_vlm_shard_batch([sample], rank_in_group=0, degree=1, group=None, algo="ring")
    params = batch.packed_seq_params
    with torch.no_grad():
        losses = model(batch.tokens, batch.labels, vision, positions, params)
        flat = dataclasses.replace(params, mrope_position_ids=torch.arange(sample.length).unsqueeze(1).expand(-1, 3))
        flat_losses = model(batch.tokens, batch.labels, vision, positions, flat)
    assert float((losses - flat_losses).abs().max()) > 1e-4


def test_same_seed_same_weights(one_rank: None) -> None:
    first, second, other = (build_vlm_model(MODEL, VISION, seed=s) for s in (7, 7, 8))
    for (name, a), (_, b), (_, c) in zip(first.named_parameters(), second.named_parameters(), other.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(a, c) for a, c in zip(first.vision.parameters(), other.vision.parameters()))
