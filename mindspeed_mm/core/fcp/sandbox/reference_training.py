"""Single-process reference training: every sample alone, unsharded, with plain causal attention.

It shares nothing with FCP's execution path (no plan, no packing, no sharding, no distributed
attention, no gradient all-reduce) and uses the same model, data, seed and loss normalisation, so
FCP and static-CP runs must reproduce its losses and final parameters.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from mindspeed_mm.core.fcp.sandbox.core_attention import CoreAttentionSlot
from mindspeed_mm.core.fcp.sandbox.run_config import RunConfig
from mindspeed_mm.core.fcp.sandbox.text_dataset import Sample, build_dataset
from mindspeed_mm.core.fcp.sandbox.gpt_model import build_gpt_model
from mindspeed_mm.core.fcp.sandbox.optimizer import build_optimizer
from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.sandbox.results import StepRecord, TrainResult


class ReferenceCoreAttention(CoreAttentionSlot):
    """Causal attention over one whole document with torch's SDPA."""

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               packed_seq_params: FCPPackedSeqParams | None) -> torch.Tensor:
        if packed_seq_params is None or packed_seq_params.cu_seqlens is None or (
            packed_seq_params.cu_seqlens.tolist() != [0, query.shape[0]]
        ):
            raise ValueError("ReferenceCoreAttention takes exactly one whole document per call")
        repeat = query.shape[1] // key.shape[1]
        # [t, heads, d] -> [heads, t, d]
        q = query.transpose(0, 1)
        k = key.repeat_interleave(repeat, dim=1).transpose(0, 1)
        v = value.repeat_interleave(repeat, dim=1).transpose(0, 1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
        return out.transpose(0, 1)


def text_sample_token_losses(model: torch.nn.Module, sample: Sample) -> torch.Tensor:
    """`[length]` token losses of `sample` run alone and unsharded (every token's; `sample.loss_mask` says which
    count)."""
    positions = torch.arange(sample.length, dtype=torch.int64)
    token_losses = model(
        sample.tokens.unsqueeze(0),
        positions.unsqueeze(0),
        None,
        labels=sample.labels.unsqueeze(0),
        packed_seq_params=FCPPackedSeqParams(
            cu_seqlens=torch.tensor([0, sample.length], dtype=torch.int64), position_ids=positions
        ),
    )
    return token_losses.reshape(-1)


def backward_batch(sample_loss: Callable[[int], torch.Tensor], indices: Sequence[int], normaliser: int) -> float:
    """Backpropagates each sample's summed token loss (`sample_loss(index)`) divided by the batch's loss tokens,
    one sample at a time; returns the batch's loss (the sum over `normaliser`)."""
    loss_sum = 0.0
    for index in indices:
        loss = sample_loss(index)
        (loss / normaliser).backward()
        loss_sum += float(loss.detach().to(torch.float64))
    return loss_sum / normaliser


def _masked_loss(model: torch.nn.Module, sample: Sample) -> torch.Tensor:
    return (text_sample_token_losses(model, sample) * sample.loss_mask).sum()


def train_reference(config: RunConfig, progress: bool = False) -> tuple[TrainResult, dict[str, torch.Tensor]]:
    """Trains the text-only decoder on one process; returns the step records and the final parameters
    (a run with a vision section: `vision.vlm_reference.train_vlm_reference`).

    megatron-core's model-parallel state must be initialised (one rank, TP = PP = 1).
    """
    dataset = build_dataset(config)
    model = build_gpt_model(config.model, config.training.seed, core_attention=ReferenceCoreAttention)
    result = run_reference_steps(config, model, dataset.lengths, dataset.loss_tokens,
                                 lambda index: _masked_loss(model, dataset[index]),
                                 progress=progress)
    return result, {name: p.detach().clone() for name, p in model.named_parameters()}


def run_reference_steps(
    config: RunConfig,
    model: torch.nn.Module,
    lengths: np.ndarray,
    loss_tokens: np.ndarray,
    sample_loss: Callable[[int], torch.Tensor],
    *,
    vision_patches: np.ndarray | None = None,
    progress: bool = False,
) -> TrainResult:
    """The reference training loop: per step, each sample's summed token loss (`sample_loss(index)`)
    divided by the global batch's loss tokens is backpropagated alone, then one optimizer step."""
    t = config.training
    optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], config.optimizer)
    result = TrainResult(context_parallel_algo="reference", world_size=1, async_planning=False)
    model.train()
    for step in tqdm(range(t.train_iters), desc="reference", unit="step", disable=not progress):
        started = time.perf_counter()
        indices = range(step * t.global_batch_size, (step + 1) * t.global_batch_size)
        batch = slice(indices.start, indices.stop)
        loss = backward_batch(sample_loss, indices, int(loss_tokens[batch].sum()))
        forward_backward_ms = (time.perf_counter() - started) * 1e3
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        patches = None if vision_patches is None else vision_patches[batch]
        result.steps.append(
            StepRecord(
                iteration=step + 1,
                loss=loss,
                sample_indices=list(indices),
                lengths=[int(x) for x in lengths[batch]],
                tokens_trained=[int(x) for x in lengths[batch]],
                loss_tokens_trained=[int(x) for x in loss_tokens[batch]],
                groups_trained=[1] * len(indices),
                plan_digest="",
                round_degrees=[],
                predicted_round_ms=[],
                measured_round_ms=[],
                timings_ms={
                    "forward_backward_ms": forward_backward_ms,
                    "step_ms": (time.perf_counter() - started) * 1e3,
                },
                vision_patches_trained=[] if patches is None else [int(x) for x in patches],
                vision_patches_per_rank=[] if patches is None else [int(patches.sum())],
            )
        )
    return result
