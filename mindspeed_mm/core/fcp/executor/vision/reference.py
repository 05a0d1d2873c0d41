"""Single-process VLM reference: every sample alone and whole (all its frames encoded at once, full
3D position ids, plain causal attention), no plan, no sharding, no exchange, no all-reduce."""
from __future__ import annotations

import time

import torch
from tqdm import tqdm

from mindspeed_mm.core.fcp.executor.config import RunConfig
from mindspeed_mm.core.fcp.executor.optimizer import build_optimizer
from mindspeed_mm.core.fcp.executor.reference import ReferenceCoreAttention
from mindspeed_mm.core.fcp.executor.results import StepRecord, TrainResult
from mindspeed_mm.core.fcp.executor.vision.dataset import VideoCaptionDataset, build_video_dataset
from mindspeed_mm.core.fcp.executor.vision.encoder import FrameBatch
from mindspeed_mm.core.fcp.executor.vision.model import VisionLanguageModel, build_vlm_model
from mindspeed_mm.core.fcp.executor.vision.rotary import MRopePackedSeqParams


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
    t = config.training
    dataset = build_video_dataset(config)
    model = build_vlm_model(config.model, config.vision, t.seed, core_attention=ReferenceCoreAttention)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(params, config.optimizer)
    result = TrainResult(context_parallel_algo="reference", world_size=1, async_planning=False)
    model.train()
    for step in tqdm(range(t.train_iters), desc="reference", unit="step", disable=not progress):
        started = time.perf_counter()
        indices = range(step * t.global_batch_size, (step + 1) * t.global_batch_size)
        normaliser = int(dataset.loss_tokens[indices.start : indices.stop].sum())
        loss_sum = 0.0
        for index in indices:
            sample_loss = sample_token_losses(model, dataset, index).sum()
            (sample_loss / normaliser).backward()
            loss_sum += float(sample_loss.detach().to(torch.float64))
        forward_backward_ms = (time.perf_counter() - started) * 1e3
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lengths = dataset.lengths[indices.start : indices.stop]
        patches = dataset.vision_patches[indices.start : indices.stop]
        result.steps.append(
            StepRecord(
                iteration=step + 1,
                loss=loss_sum / normaliser,
                sample_indices=list(indices),
                lengths=[int(x) for x in lengths],
                tokens_trained=[int(x) for x in lengths],
                loss_tokens_trained=[int(x) for x in dataset.loss_tokens[indices.start : indices.stop]],
                groups_trained=[1] * len(indices),
                plan_digest="",
                round_degrees=[],
                predicted_round_ms=[],
                measured_round_ms=[],
                timings_ms={
                    "forward_backward_ms": forward_backward_ms,
                    "step_ms": (time.perf_counter() - started) * 1e3,
                },
                vision_patches_trained=[int(x) for x in patches],
                vision_patches_per_rank=[int(patches.sum())],
            )
        )
    return result, {name: p.detach().clone() for name, p in model.named_parameters()}
