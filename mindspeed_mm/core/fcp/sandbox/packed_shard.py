"""One rank's zigzag shard of its group's packed batch: the shard function of every FCP driver.

A packed batch holds the group's samples, one document each, as tensors of shape `[1, tokens, ...]`
with the document boundaries under `cu_seqlens`. Each tensor is cut per document into `2 * degree`
chunks and group rank `r` keeps chunks `r` and `2 * degree - 1 - r` of every document.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.solver.short_shards import executed_lengths
from mindspeed_mm.core.fcp.parallel import zigzag_positions, zigzag_shard

CU_SEQLENS_KEY = "cu_seqlens"
"""Batch key of the document boundaries of the group's packed sequence (consumed by the shard function)."""
PACKED_SEQ_PARAMS_KEY = "packed_seq_params"
"""Batch key under which the sharded batch carries the round's `FCPPackedSeqParams`."""
LOSS_MASK_KEY = "loss_mask"
"""Batch key of the per-token loss weights; a padding document gets zeros there."""
SEQ_DIM = 1
"""Batch tensors are `[micro_batch=1, tokens, ...]`: the sequence is dimension 1."""


def checked_cu_seqlens(batch: Mapping[str, Any]) -> torch.Tensor:
    """`batch[CU_SEQLENS_KEY]` as int64 on the CPU; raises naming the key when it is missing or malformed."""
    if CU_SEQLENS_KEY not in batch:
        raise ValueError(
            f"FCP needs the packed batch's document boundaries under batch[{CU_SEQLENS_KEY!r}] "
            f"(int64 [num_docs + 1], starting at 0); got keys {sorted(batch)}"
        )
    cu_seqlens = torch.as_tensor(batch[CU_SEQLENS_KEY]).reshape(-1).to("cpu", torch.int64)
    if cu_seqlens.numel() < 2 or int(cu_seqlens[0]) != 0 or bool((cu_seqlens[1:] <= cu_seqlens[:-1]).any()):
        raise ValueError(
            f"batch[{CU_SEQLENS_KEY!r}] must start at 0 and increase strictly, got {cu_seqlens.tolist()}"
        )
    return cu_seqlens


def _check_tensors(batch: Mapping[str, Any], total: int) -> None:
    if batch.get("attention_mask") is not None:
        raise ValueError("FCP builds each document's causal mask from cu_seqlens: batch['attention_mask'] must be None")
    for key, value in batch.items():
        if key != CU_SEQLENS_KEY and isinstance(value, torch.Tensor) and (
            value.dim() < 2 or value.shape[0] != 1 or value.shape[SEQ_DIM] != total
        ):
            raise ValueError(
                f"batch[{key!r}] has shape {tuple(value.shape)}; FCP shards tensors of shape [1, {total}, ...] "
                f"(one packed sequence of cu_seqlens[-1] = {total} tokens)"
            )


def with_padding_document(batch: Mapping[str, Any], cu_seqlens: torch.Tensor, degree: int,
                          fill: Mapping[str, int] | None = None) -> tuple[dict[str, Any], torch.Tensor]:
    """`batch` and its boundaries, plus a loss-free padding document when its documents alone would leave
    some rank of a group of `degree` an empty shard (megatron-core's attention cannot reshape one).

    The padding document (`2 * degree` tokens, decided identically on every rank of the group) attends
    only to itself and has zero loss weight, so the real tokens' outputs and gradients are unchanged.
    Its tokens are 0 (or `fill[key]`), its position ids count from 0."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    padded = executed_lengths(lengths, degree)
    if len(padded) == len(lengths):
        return dict(batch), cu_seqlens
    if LOSS_MASK_KEY not in batch:
        raise ValueError(
            f"the group's {int(cu_seqlens[-1])} tokens leave a rank of a group of degree {degree} without tokens, "
            f"so FCP appends a loss-free padding document, which needs the loss weights under "
            f"batch[{LOSS_MASK_KEY!r}]; got keys {sorted(batch)}"
        )
    extra = padded[-1]
    fill = fill or {}
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if key == CU_SEQLENS_KEY or not isinstance(value, torch.Tensor):
            out[key] = value
            continue
        shape = (1, extra, *value.shape[2:])
        if key == "position_ids":
            pad = torch.arange(extra, dtype=value.dtype, device=value.device).reshape(1, extra, *([1] * (value.dim() - 2)))
            pad = pad.expand(shape)
        else:
            pad = torch.full(shape, fill.get(key, 0), dtype=value.dtype, device=value.device)
        out[key] = torch.cat([value, pad], dim=SEQ_DIM)
    return out, torch.cat([cu_seqlens, cu_seqlens[-1:] + extra])


def shard_packed_batch(batch: Mapping[str, Any], *, rank_in_group: int, degree: int, group: dist.ProcessGroup | None,
                       algo: str, kernel: str = "auto", fill: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Group rank `rank_in_group`'s shard of the packed `batch` (padded when needed, see
    `with_padding_document`), with its `position_ids` (given, or each token's index in its document)
    and the round's `FCPPackedSeqParams` under `PACKED_SEQ_PARAMS_KEY`; non-tensor values pass through."""
    if not 0 <= rank_in_group < degree:
        raise ValueError(f"rank_in_group {rank_in_group} is outside a group of degree {degree}")
    cu_seqlens = checked_cu_seqlens(batch)
    _check_tensors(batch, int(cu_seqlens[-1]))
    padded, cu_seqlens = with_padding_document(batch, cu_seqlens, degree, fill)
    sharded: dict[str, Any] = {}
    for key, value in padded.items():
        if key == CU_SEQLENS_KEY:
            continue
        if isinstance(value, torch.Tensor):
            sharded[key] = zigzag_shard(value[0], cu_seqlens, rank_in_group, degree).unsqueeze(0)
        else:
            sharded[key] = value
    given = sharded.get("position_ids")
    positions = given.reshape(-1) if given is not None else zigzag_positions(cu_seqlens, rank_in_group, degree)
    sharded["position_ids"] = positions.unsqueeze(0)
    device = next((v.device for v in sharded.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
    sharded[PACKED_SEQ_PARAMS_KEY] = FCPPackedSeqParams(
        cu_seqlens=cu_seqlens.to(device), position_ids=positions.to(device), group=group, degree=degree, algo=algo,
        kernel=kernel,
    )
    return sharded
