"""MindSpeed-MM's loss under FCP: the loss of the global batch, as if it had been trained on one device.

Upstream normalises the loss in `TransformersModel.build_loss_ctx` (`model.loss_cfg`), per
micro-batch; Megatron's schedule then divides by the number of micro-batches and the gradient
reduction averages over the data-parallel ranks. Under FCP a micro-batch is a round, in which each
rank holds a zigzag shard of its group's packed samples, so FCP builds the loss context itself:

- the labels are shifted inside each sample (a sample's last token predicts nothing, as in an
  unpacked batch) and then cut into this rank's shard;
- each token's loss is weighted as `loss_cfg.loss_type` weighs it on one device, over the whole
  global batch, and scaled by rounds x data-parallel ranks, which the schedule and the gradient
  reduction divide out again.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from mindspeed_mm.core.fcp.runtime.loss_weights import shifted_sample_labels, token_weights
from mindspeed_mm.core.fcp.runtime.round_shard import SEQLENS_KEY, RoundShard, round_shard

from .run_checks import SUPPORTED_LOSS
from .runtime import FCPRuntimeError, get_fcp_runtime


def _check_loss_cfg(model: Any) -> None:
    for key, supported in SUPPORTED_LOSS.items():
        attribute = "loss_type" if key == "loss_type" else "loss_compute_mode"
        value = getattr(model, attribute, "default")
        if value not in supported:
            raise FCPRuntimeError(
                f"model.loss_cfg.{key}: {value!r} is not supported under fcp_cp_algo (supported: {', '.join(supported)})")


def fcp_loss_context(model: Any, labels: torch.Tensor, shard: RoundShard, ignore_index: int,
                     chunked: bool) -> tuple[Callable[..., torch.Tensor], torch.Tensor]:
    """The loss closure of this rank's shard and its loss mask (like upstream's `build_loss_ctx`)."""
    from megatron.core import mpu
    from megatron.training import get_args

    args = get_args()
    _check_loss_cfg(model)
    shifted = shifted_sample_labels(labels, shard.cu_seqlens, ignore_index)
    index = shard.global_index.to(shifted.device)
    weights = token_weights(shifted, shard.cu_seqlens, ignore_index, args.global_batch_size)
    rounds = len(get_fcp_runtime().step_rounds)
    scale = rounds * mpu.get_data_parallel_world_size()
    local_labels = shifted[index]
    local_weights = (weights[index.cpu()] * scale).to(labels.device)
    loss_mask = (local_labels != ignore_index).unsqueeze(0)

    def weighted_loss(logits: torch.Tensor) -> torch.Tensor:
        token_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), local_labels,
                                     ignore_index=ignore_index, reduction="none")
        return (token_loss * local_weights.to(token_loss.dtype)).sum()

    if not chunked:
        return weighted_loss, loss_mask

    def from_hidden_states(hidden_states: torch.Tensor, head_weight: torch.Tensor,
                           head_bias: torch.Tensor | None) -> torch.Tensor:
        return weighted_loss(F.linear(hidden_states, head_weight, head_bias))

    return from_hidden_states, loss_mask


def build_loss_ctx_wrapper(build_loss_ctx: Callable[..., Any]) -> Callable[..., Any]:
    """`TransformersModel.build_loss_ctx` giving FCP's loss context inside an FCP round."""

    @functools.wraps(build_loss_ctx)
    def run(self: Any, labels: torch.Tensor, ignore_index: int = -100, chunk_size: int | None = 1024,
            **kwargs: Any) -> Any:
        shard = round_shard(get_fcp_runtime(), kwargs.get(SEQLENS_KEY))
        if shard is None:
            return build_loss_ctx(self, labels, ignore_index=ignore_index, chunk_size=chunk_size, **kwargs)
        return fcp_loss_context(self, labels, shard, ignore_index, chunked=bool(chunk_size))

    return run
