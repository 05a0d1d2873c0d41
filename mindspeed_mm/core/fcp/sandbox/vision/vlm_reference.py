"""Single-process VLM reference: every sample alone and whole (all its frames encoded at once, full
3D position ids, plain causal attention), no plan, no sharding, no exchange, no all-reduce."""
from __future__ import annotations

import torch

from mindspeed_mm.core.fcp.sandbox.run_config import RunConfig
from mindspeed_mm.core.fcp.sandbox.reference_training import ReferenceCoreAttention, run_reference_steps
from mindspeed_mm.core.fcp.sandbox.results import TrainResult
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VideoCaptionDataset, build_video_dataset
from mindspeed_mm.core.fcp.sandbox.vision.encoder import FrameBatch
from mindspeed_mm.core.fcp.sandbox.vision.vlm_model import VisionLanguageModel, build_vlm_model
from mindspeed_mm.core.fcp.sandbox.vision.shard_mrope import MRopePackedSeqParams


def sample_token_losses(model: VisionLanguageModel, dataset: VideoCaptionDataset, index: int) -> torch.Tensor:
    """`[length]` token losses of sample `index` run alone and unsharded (times its loss mask)."""
    sample = dataset[index]
    layout = sample.layout
    frames = FrameBatch.from_frame_groups(
        [dataset.frame_group(index, g) for g in range(layout.frame_groups)], [layout] * layout.frame_groups
    )
    vision_tokens = model.encode(frames)
    token_losses = model(
        sample.tokens.unsqueeze(0),
        sample.labels.unsqueeze(0),
        vision_tokens,
        torch.nonzero(sample.vision_mask).reshape(-1),
        MRopePackedSeqParams(
            cu_seqlens=torch.tensor([0, sample.length], dtype=torch.int64),
            position_ids=torch.arange(sample.length, dtype=torch.int64),
            mrope_position_ids=sample.mrope_position_ids,
        ),
    )
    return token_losses.reshape(-1) * sample.loss_mask


def train_vlm_reference(config: RunConfig, progress: bool = False) -> tuple[TrainResult, dict[str, torch.Tensor]]:
    """Trains the VLM on one process; returns the step records and the final parameters.

    megatron-core's model-parallel state must be initialised (one rank, TP = PP = 1).
    """
    if config.vision is None:
        raise ValueError(f"{config.source}: the VLM reference needs the vision section")
    dataset = build_video_dataset(config)
    model = build_vlm_model(config.model, config.vision, config.training.seed, core_attention=ReferenceCoreAttention)
    result = run_reference_steps(
        config, model, dataset.lengths, dataset.loss_tokens,
        lambda index: sample_token_losses(model, dataset, index).sum(),
        vision_patches=dataset.vision_patches, progress=progress,
    )
    return result, {name: p.detach().clone() for name, p in model.named_parameters()}
