"""Ring attention on the per-document zigzag layout (or on a layout of merged blocks, `zigzag_layout`'s `block`).

At step ``s`` rank ``r`` attends with the K/V block of rank ``(r - s) mod d`` while the block it
holds travels to rank ``r + 1``. Under a causal mask, chunk order equals position order, so for a
source rank ``src != r`` each document contributes one fully visible rectangle:
``src < r``: all local queries x the source's front chunk; ``src > r``: the local back chunk x all
source keys. The other pairs are fully masked and never computed. The backward circulates K/V the
same way, while the K/V gradients travel with their block and reach their owner after ``d`` hops.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from mindspeed_mm.core.fcp.parallel.attention_call import AttentionCall
from mindspeed_mm.core.fcp.parallel.collectives import PendingExchange, RingComm
from mindspeed_mm.core.fcp.parallel.kernels import VarlenSegments, accumulation_dtype
from mindspeed_mm.core.fcp.parallel.zigzag import ZigzagLayout, zigzag_layout

_KV_TAG = 0
_KV_GRAD_TAG = 1


@dataclass(frozen=True)
class RingStep:
    """Which rows take part in one ring step and how they pair up."""

    source: int
    """Group rank whose K/V block this step uses."""
    query_rows: torch.Tensor | None
    """Local query rows of the step (None: all)."""
    key_rows: torch.Tensor | None
    """Rows of the source block used by the step (None: all)."""
    segments: VarlenSegments
    """Per-document pairing of the selected query and key rows."""
    causal: bool
    """Whether the block needs the causal mask (only the diagonal step under a causal mask)."""


def _cu(lengths: torch.Tensor) -> tuple[int, ...]:
    return (0, *torch.cumsum(lengths, dim=0).tolist())


def ring_schedule(layout: ZigzagLayout, rank: int, causal: bool) -> tuple[RingStep, ...]:
    """The ``degree`` steps rank ``rank`` runs (cached per layout, rank and mask)."""
    return _schedule(layout.cu_seqlens, layout.degree, layout.block, rank, causal)


@lru_cache(maxsize=256)
def _schedule(cu_seqlens: tuple[int, ...], degree: int, block: int, rank: int, causal: bool) -> tuple[RingStep, ...]:
    layout = zigzag_layout(cu_seqlens, degree, block)
    own = layout.shard(rank)
    own_cu = tuple(own.cu_seqlens.tolist())
    steps = []
    for step in range(degree):
        source = (rank - step) % degree
        src = layout.shard(source)
        src_cu = tuple(src.cu_seqlens.tolist())
        if source == rank:
            steps.append(RingStep(source, None, None, VarlenSegments(own_cu, own_cu), causal))
        elif not causal:
            steps.append(RingStep(source, None, None, VarlenSegments(own_cu, src_cu), False))
        elif source < rank:
            segments = VarlenSegments(own_cu, _cu(src.front_lengths))
            steps.append(RingStep(source, None, src.front_index, segments, False))
        else:
            segments = VarlenSegments(_cu(own.back_lengths), src_cu)
            steps.append(RingStep(source, own.back_index, None, segments, False))
    return tuple(steps)


def _rows(tensor: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return tensor if rows is None else tensor.index_select(0, rows.to(tensor.device))


def _merge_into(
    out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor, rows: torch.Tensor | None
) -> None:
    """Fold one block's (out, lse) into the running (out, lse) of ``rows`` via log-sum-exp weights."""
    old_out, old_lse = _rows(out, rows), _rows(lse, rows)
    new_lse = torch.logaddexp(old_lse, block_lse)
    # Rows that have seen no key yet keep lse = -inf; a zero shift keeps both weights at 0.
    shift = new_lse.masked_fill(torch.isneginf(new_lse), 0.0)
    merged = old_out * torch.exp(old_lse - shift).unsqueeze(-1) + block_out.to(out.dtype) * torch.exp(
        block_lse - shift
    ).unsqueeze(-1)
    if rows is None:
        out.copy_(merged)
        lse.copy_(new_lse)
    else:
        index = rows.to(out.device)
        out.index_copy_(0, index, merged)
        lse.index_copy_(0, index, new_lse)


def _add_rows(target: torch.Tensor, rows: torch.Tensor | None, values: torch.Tensor) -> None:
    if rows is None:
        target.add_(values.to(target.dtype))
    else:
        target.index_add_(0, rows.to(target.device), values.to(target.dtype))


def ring_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's attention output (dtype of q) and its log-sum-exp (``[t, heads]``, at least fp32)."""
    degree, layout = call.degree, call.layout
    steps = ring_schedule(layout, call.rank, call.causal)
    comm = RingComm(call.group) if degree > 1 else None
    acc = accumulation_dtype(q.dtype)
    out = torch.zeros(q.shape, dtype=acc, device=q.device)
    lse = torch.full(q.shape[:2], float("-inf"), dtype=acc, device=q.device)
    kv = torch.stack([k, v])  # [2, t, kv_heads, head_dim]: one message per hop
    bytes_sent = 0
    for index, step in enumerate(steps):
        pending: PendingExchange | None = None
        if index + 1 < degree:
            next_len = layout.shard(steps[index + 1].source).length
            incoming = kv.new_empty((2, next_len, *kv.shape[2:]))
            pending = comm.exchange(kv, incoming, tag=_KV_TAG)
            bytes_sent += pending.bytes_sent
        block_out, block_lse = call.kernel.forward(
            _rows(q, step.query_rows), _rows(kv[0], step.key_rows), _rows(kv[1], step.key_rows), step.segments,
            causal=step.causal, softmax_scale=call.softmax_scale,
        )
        _merge_into(out, lse, block_out, block_lse, step.query_rows)
        if pending is not None:
            pending.wait()
            kv = incoming
    call.record(bytes_sent, backward=False)
    return out.to(q.dtype), lse


def ring_backward(
    dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    call: AttentionCall,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of this rank's q, k, v."""
    degree, layout = call.degree, call.layout
    steps = ring_schedule(layout, call.rank, call.causal)
    comm = RingComm(call.group) if degree > 1 else None
    acc = accumulation_dtype(q.dtype)
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    kv = torch.stack([k, v])
    kv_grad: torch.Tensor | None = None
    grad_pending: PendingExchange | None = None
    grad_incoming: torch.Tensor | None = None
    bytes_sent = 0
    for index, step in enumerate(steps):
        kv_pending: PendingExchange | None = None
        if index + 1 < degree:
            incoming = kv.new_empty((2, layout.shard(steps[index + 1].source).length, *kv.shape[2:]))
            kv_pending = comm.exchange(kv, incoming, tag=_KV_TAG)
            bytes_sent += kv_pending.bytes_sent
        rows = step.query_rows
        dq_block, dk_block, dv_block = call.kernel.backward(
            _rows(dout, rows), _rows(q, rows), _rows(kv[0], step.key_rows), _rows(kv[1], step.key_rows),
            _rows(out, rows), _rows(lse, rows), step.segments, causal=step.causal, softmax_scale=call.softmax_scale,
        )
        _add_rows(dq, rows, dq_block)
        # The gradient of the block held now arrives from the previous rank, which held it one step ago.
        if grad_pending is None:
            kv_grad = torch.zeros((2, *kv.shape[1:]), dtype=acc, device=q.device)
        else:
            grad_pending.wait()
            kv_grad = grad_incoming
        _add_rows(kv_grad[0], step.key_rows, dk_block)
        _add_rows(kv_grad[1], step.key_rows, dv_block)
        if degree > 1:
            # After the last step the block handed on is the next rank's own: its gradient goes home.
            following = steps[index + 1].source if index + 1 < degree else call.rank
            grad_incoming = kv_grad.new_empty((2, layout.shard(following).length, *kv.shape[2:]))
            grad_pending = comm.exchange(kv_grad, grad_incoming, tag=_KV_GRAD_TAG)
            bytes_sent += grad_pending.bytes_sent
        if kv_pending is not None:
            kv_pending.wait()
            kv = incoming
    if grad_pending is not None:
        grad_pending.wait()
        kv_grad = grad_incoming
    call.record(bytes_sent, backward=True)
    return dq.to(q.dtype), kv_grad[0].to(k.dtype), kv_grad[1].to(v.dtype)


class RingAttention(torch.autograd.Function):
    """Autograd wrapper of :func:`ring_forward` / :func:`ring_backward`."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> torch.Tensor:
        out, lse = ring_forward(q, k, v, call)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.call = call
        return out

    @staticmethod
    def backward(ctx, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(dout, q, k, v, out, lse, ctx.call)
        return dq, dk, dv, None
