"""Single-process reference training: every sample alone, unsharded, with plain causal attention.

It shares nothing with FCP's execution path (no plan, no packing, no sharding, no distributed
attention, no gradient all-reduce) and uses the same model, data, seed and loss normalisation, so
FCP and static-CP runs must reproduce its losses and final parameters.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from tqdm import tqdm

from mindspeed_mm.core.fcp.executor.config import RunConfig
from mindspeed_mm.core.fcp.executor.dataset import build_dataset
from mindspeed_mm.core.fcp.executor.model import build_gpt_model
from mindspeed_mm.core.fcp.executor.optimizer import build_optimizer
from mindspeed_mm.core.fcp.executor.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.executor.results import StepRecord, TrainResult


class ReferenceCoreAttention(MegatronModule):
    """Causal attention over one whole document with torch's SDPA (DotProductAttention's signature)."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
    ) -> None:
        super().__init__(config=config)
        self.softmax_scale = softmax_scale

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: FCPPackedSeqParams | None = None,
    ) -> torch.Tensor:
        """`query [t, heads, d]`, `key/value [t, kv_heads, d]` of one document -> `[t, 1, heads * d]`."""
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
        return out.transpose(0, 1).reshape(query.shape[0], 1, -1)


def train_reference(config: RunConfig, progress: bool = False) -> tuple[TrainResult, dict[str, torch.Tensor]]:
    """Trains on one process; returns the step records and the final parameters.

    megatron-core's model-parallel state must be initialised (one rank, TP = PP = 1). A run with a
    vision section trains the VLM (`vision.reference.train_vlm_reference`).
    """
    if config.is_vlm:
        from mindspeed_mm.core.fcp.executor.vision.reference import train_vlm_reference

        return train_vlm_reference(config, progress=progress)
    t = config.training
    dataset = build_dataset(config)
    model = build_gpt_model(config.model, t.seed, core_attention=ReferenceCoreAttention)
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
            sample = dataset[index]
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
            sample_loss = (token_losses.reshape(-1) * sample.loss_mask).sum()
            (sample_loss / normaliser).backward()
            loss_sum += float(sample_loss.detach().to(torch.float64))
        forward_backward_ms = (time.perf_counter() - started) * 1e3
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lengths = dataset.lengths[indices.start : indices.stop]
        loss_tokens = dataset.loss_tokens[indices.start : indices.stop]
        result.steps.append(
            StepRecord(
                iteration=step + 1,
                loss=loss_sum / normaliser,
                sample_indices=list(indices),
                lengths=[int(x) for x in lengths],
                tokens_trained=[int(x) for x in lengths],
                loss_tokens_trained=[int(x) for x in loss_tokens],
                groups_trained=[1] * len(indices),
                plan_digest="",
                round_degrees=[],
                predicted_round_ms=[],
                measured_round_ms=[],
                timings_ms={
                    "forward_backward_ms": forward_backward_ms,
                    "step_ms": (time.perf_counter() - started) * 1e3,
                },
            )
        )
    return result, {name: p.detach().clone() for name, p in model.named_parameters()}
