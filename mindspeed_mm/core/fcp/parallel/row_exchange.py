"""The differentiable row exchange: an uneven all-to-all of rows over a process group whose backward pass is the
reverse all-to-all of their gradients (each sent row gets the gradient of the row it became)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.collectives import all_to_all_rows


class _ExchangeRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, send: torch.Tensor, send_counts: tuple[int, ...],  # type: ignore[override]
                recv_counts: tuple[int, ...], group: dist.ProcessGroup) -> torch.Tensor:
        ctx.send_counts, ctx.recv_counts, ctx.group = send_counts, recv_counts, group
        received, _ = all_to_all_rows(send, send_counts, recv_counts, group)
        return received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        returned, _ = all_to_all_rows(grad.contiguous(), ctx.recv_counts, ctx.send_counts, ctx.group)
        return returned, None, None, None


def exchange_rows(send: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int],
                  group: dist.ProcessGroup | None) -> torch.Tensor:
    """`[sum(recv_counts), ...]` rows received from every rank of `group` (in rank order) for `send`
    (`[sum(send_counts), ...]`, the rows for each rank in rank order). Every rank of the group calls it, also with
    nothing to send or receive: it is a collective in the forward and in the backward pass. Without a group (or a
    group of one rank) the rows are returned as they are."""
    if group is None or dist.get_world_size(group) == 1:
        return send
    return _ExchangeRows.apply(send, tuple(int(n) for n in send_counts), tuple(int(n) for n in recv_counts), group)


__all__ = ["exchange_rows"]
