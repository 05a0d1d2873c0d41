"""Megatron's `get_batch_on_this_cp_rank` for FCP: this rank's zigzag shard of its group's packed batch."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.executor.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.parallel import zigzag_positions, zigzag_shard

from ..runtime import FCPRound, get_fcp_runtime

CU_SEQLENS_KEY = "cu_seqlens"
"""Batch key of the document boundaries of the group's packed sequence (consumed by the shard function)."""
PACKED_SEQ_PARAMS_KEY = "packed_seq_params"
"""Batch key under which the sharded batch carries the round's `FCPPackedSeqParams`."""
SEQ_DIM = 1
"""Megatron's batch tensors are `[micro_batch=1, tokens, ...]`: the sequence is dimension 1."""


def _checked_cu_seqlens(batch: Mapping[str, Any]) -> torch.Tensor:
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


def shard_batch_for_round(
    batch: Mapping[str, Any], fcp_round: FCPRound, group: dist.ProcessGroup | None
) -> dict[str, Any]:
    """This rank's shard of the group's packed batch, plus the round's `FCPPackedSeqParams`.

    Every member of the group receives the same packed batch (its samples, one document each). Each
    tensor of shape `[1, tokens, ...]` is cut per document into `2 * degree` chunks, and this rank
    keeps chunks `rank_in_group` and `2 * degree - 1 - rank_in_group` of every document. Position ids
    (given, or each token's index in its document) go with the tokens into `FCPPackedSeqParams`.
    """
    cu_seqlens = _checked_cu_seqlens(batch)
    total = int(cu_seqlens[-1])
    rank, degree = fcp_round.rank_in_group, fcp_round.degree
    sharded: dict[str, Any] = {}
    for key, value in batch.items():
        if key == CU_SEQLENS_KEY:
            continue
        if key == "attention_mask" and value is not None:
            raise ValueError(
                "FCP builds each document's causal mask from cu_seqlens: batch['attention_mask'] must be None")
        if not isinstance(value, torch.Tensor):
            sharded[key] = value
            continue
        if value.dim() < 2 or value.shape[0] != 1 or value.shape[SEQ_DIM] != total:
            raise ValueError(
                f"batch[{key!r}] has shape {tuple(value.shape)}; FCP shards tensors of shape [1, {total}, ...] "
                f"(one packed sequence of cu_seqlens[-1] = {total} tokens)"
            )
        sharded[key] = zigzag_shard(value[0], cu_seqlens, rank, degree).unsqueeze(0)
    given = sharded.get("position_ids")
    positions = given.reshape(-1) if given is not None else zigzag_positions(cu_seqlens, rank, degree)
    if given is None:
        sharded["position_ids"] = positions.unsqueeze(0)
    device = next((v.device for v in sharded.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
    sharded[PACKED_SEQ_PARAMS_KEY] = FCPPackedSeqParams(
        cu_seqlens=cu_seqlens.to(device),
        position_ids=positions.to(device),
        group=group,
        degree=degree,
        algo=fcp_round.algo,
    )
    return sharded


def get_batch_on_this_cp_rank(batch: dict[str, Any]) -> dict[str, Any]:
    """Replacement of Megatron's function: shards for the round the FCP driver is running."""
    runtime = get_fcp_runtime()
    fcp_round = runtime.current_round
    return shard_batch_for_round(batch, fcp_round, runtime.process_group(fcp_round))
