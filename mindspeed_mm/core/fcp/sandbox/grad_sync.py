"""The once-per-step gradient all-reduce over all FCP ranks."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist


def allreduce_gradients(params: Sequence[torch.nn.Parameter], group: dist.ProcessGroup | None = None) -> None:
    """Sums every parameter's gradient over `group` with a single all-reduce of one flat buffer.

    Each rank's gradient is already scaled by the global batch's loss normaliser, so the sum is the
    gradient of the global batch. A parameter that got no gradient on this rank contributes zeros.
    """
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for param in params:
        count = param.numel()
        param.grad = flat[offset : offset + count].view_as(param)
        offset += count
