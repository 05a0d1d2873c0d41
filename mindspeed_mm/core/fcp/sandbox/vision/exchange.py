"""Moving merged vision tokens from the rank that encoded them to the rank whose zigzag shard holds them.

Each rank of a CP group encodes some frame groups (see `frames`) and gets one row per merged vision
token, in packed order. `vision_routing` works out, identically on every rank of the group, which of
these rows go to which rank and where each received row lands in the receiver's shard; one uneven
all-to-all over the group then delivers them. `exchange_vision_tokens` is differentiable: the
backward pass sends each row's gradient back to the rank that encoded it by the reverse all-to-all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.sandbox.vision.frames import FrameUnit
from mindspeed_mm.core.fcp.parallel import ZigzagLayout


@dataclass(frozen=True)
class VisionRouting:
    """One rank's part of the vision-token exchange of one round."""

    local_tokens: torch.Tensor
    """`[encoded]` int64 packed-batch index of each row this rank encodes, ascending (the encoder's row order)."""
    send_order: torch.Tensor
    """`[encoded]` int64 rows of the encoder output in send order (grouped by receiving rank)."""
    send_splits: tuple[int, ...]
    """Rows sent to each group rank."""
    recv_splits: tuple[int, ...]
    """Rows received from each group rank."""
    recv_positions: torch.Tensor
    """`[received]` int64 shard-local row of each received row (all vision tokens of this rank's shard)."""


def vision_routing(
    units: Sequence[FrameUnit], owners: Sequence[int], layout: ZigzagLayout, holders: torch.Tensor, rank: int
) -> VisionRouting:
    """The exchange seen from group rank `rank`; `holders` is `frames.token_holders(layout)`."""
    degree = layout.degree
    if not 0 <= rank < degree:
        raise ValueError(f"rank {rank} is outside a group of degree {degree}")
    if len(owners) != len(units):
        raise ValueError(f"need one owner per unit: {len(units)} units, {len(owners)} owners")
    encoder = torch.full((layout.total_tokens,), -1, dtype=torch.int64)
    for unit, owner in zip(units, owners):
        if not 0 <= owner < degree:
            raise ValueError(f"unit {unit} is owned by rank {owner}, outside a group of degree {degree}")
        encoder[unit.token_start : unit.token_start + unit.tokens] = owner

    local_tokens = torch.nonzero(encoder == rank).reshape(-1)
    destinations = holders[local_tokens]
    send_order = torch.sort(destinations, stable=True).indices

    shard = layout.shard(rank)
    # Packed indices of this shard's vision tokens, ascending, then grouped by encoding rank.
    incoming = torch.sort(shard.global_index[encoder[shard.global_index] >= 0]).values
    by_source = torch.sort(encoder[incoming], stable=True).indices
    shard_row = torch.empty(layout.total_tokens, dtype=torch.int64)
    shard_row[shard.global_index] = torch.arange(shard.length, dtype=torch.int64)
    return VisionRouting(
        local_tokens=local_tokens,
        send_order=send_order,
        send_splits=tuple(torch.bincount(destinations, minlength=degree).tolist()),
        recv_splits=tuple(torch.bincount(encoder[incoming], minlength=degree).tolist()),
        recv_positions=shard_row[incoming[by_source]],
    )


class _AllToAllRows(torch.autograd.Function):
    """Uneven all-to-all over dim 0 whose backward is the reverse all-to-all."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, rows: torch.Tensor, send_splits: list[int], recv_splits: list[int], group: dist.ProcessGroup
    ) -> torch.Tensor:
        ctx.splits = (send_splits, recv_splits)
        ctx.group = group
        return _all_to_all(rows, send_splits, recv_splits, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        send_splits, recv_splits = ctx.splits
        return _all_to_all(grad, recv_splits, send_splits, ctx.group), None, None, None


def _all_to_all(
    rows: torch.Tensor, send_splits: list[int], recv_splits: list[int], group: dist.ProcessGroup
) -> torch.Tensor:
    # [sum(send_splits), hidden] -> [sum(recv_splits), hidden]
    out = rows.new_empty((sum(recv_splits), *rows.shape[1:]))
    dist.all_to_all_single(
        out, rows.contiguous(), output_split_sizes=recv_splits, input_split_sizes=send_splits, group=group
    )
    return out


def exchange_vision_tokens(
    encoded: torch.Tensor, routing: VisionRouting, group: dist.ProcessGroup | None
) -> torch.Tensor:
    """`[received, hidden]` rows for `routing.recv_positions`, from this rank's `[encoded, hidden]` rows.

    Every rank of the group must call it (also with nothing to send or receive): it is a collective
    in the forward and in the backward pass. To keep the backward collective on a rank that encodes
    nothing, pass a `[0, hidden]` tensor that requires grad.
    """
    if encoded.shape[0] != routing.send_order.numel():
        raise ValueError(f"routing expects {routing.send_order.numel()} encoded rows, got {encoded.shape[0]}")
    rows = encoded.index_select(0, routing.send_order.to(encoded.device))
    if group is None or dist.get_world_size(group) == 1:
        return rows
    return _AllToAllRows.apply(rows, list(routing.send_splits), list(routing.recv_splits), group)
