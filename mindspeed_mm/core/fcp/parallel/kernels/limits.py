"""Keeps every kernel call inside what the device kernel accepts: a call over its limits becomes several calls.

A varlen call attends query segment ``i`` to key segment ``i`` for every ``i``. Pairs are independent, so a
call may be cut between pairs; a pair longer than the row limit is cut into square blocks of at most
``max_rows`` rows (under a causal mask: the diagonal blocks stay causal, the blocks below it are full, the
ones above are skipped). Pieces that share query rows go to different calls, whose partial outputs merge
by their log-sum-exp, as ring steps do; the backward runs each call with the merged output and
log-sum-exp and adds the gradients of the rows it read. Pairs with an empty query or key segment are
never sent: their rows get output 0 and log-sum-exp ``-inf``, the kernel contract.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import AttentionKernel, VarlenSegments


@dataclass(frozen=True)
class KernelLimits:
    """What one call of a device kernel may hold (None: no limit)."""

    max_rows: int | None = None
    """Query rows, and key rows, of one call (and so of one segment)."""
    max_segments: int | None = None
    """Segment pairs of one call."""
    accepts_empty_segments: bool = True
    """Whether a call may hold a pair with an empty query or key segment."""

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_segments"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"KernelLimits.{name} must be positive, got {value}")


@dataclass(frozen=True)
class KernelCall:
    """One call of a split kernel invocation."""

    query_rows: torch.Tensor
    """Rows of the invocation's queries this call reads, in call order (int64)."""
    key_rows: torch.Tensor
    """Rows of the invocation's keys / values this call reads (int64)."""
    segments: VarlenSegments
    """Pairing of the selected rows."""
    causal: bool


@dataclass(frozen=True)
class CallPlan:
    """How one invocation runs: as it is (``direct``), or as ``calls`` merged (none: nothing to compute)."""

    direct: bool
    calls: tuple[KernelCall, ...]


@dataclass(frozen=True)
class _Piece:
    qa: int
    qb: int
    ka: int
    kb: int
    causal: bool
    query_block: tuple[int, int]
    """(pair, query block) that owns these query rows: two pieces with the same owner go to different calls."""


def _pair_pieces(index: int, qa: int, qb: int, ka: int, kb: int, causal: bool, max_rows: int | None) -> list[_Piece]:
    lq, lk = qb - qa, kb - ka
    if max_rows is None or (lq <= max_rows and lk <= max_rows):
        return [_Piece(qa, qb, ka, kb, causal, (index, 0))]
    q_blocks = [(qa + s, min(qb, qa + s + max_rows)) for s in range(0, lq, max_rows)]
    k_blocks = [(ka + s, min(kb, ka + s + max_rows)) for s in range(0, lk, max_rows)]
    pieces = []
    for i, (q0, q1) in enumerate(q_blocks):
        for j, (k0, k1) in enumerate(k_blocks):
            if causal and j > i:
                break  # above the diagonal: masked
            pieces.append(_Piece(q0, q1, k0, k1, causal and i == j, (index, i)))
    return pieces


@lru_cache(maxsize=512)
def plan_calls(segments: VarlenSegments, causal: bool, limits: KernelLimits) -> CallPlan:
    """The calls that compute `segments` within `limits` (cached: ring steps repeat every layer)."""
    cu_q, cu_k = segments.cu_seqlens_q, segments.cu_seqlens_k
    pairs = list(zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:]))
    non_empty = [(qa, qb, ka, kb) for qa, qb, ka, kb in pairs if qb > qa and kb > ka]
    if not non_empty:
        return CallPlan(direct=False, calls=())  # no query row sees a key: output 0, log-sum-exp -inf
    fits = (
        (limits.accepts_empty_segments or len(non_empty) == len(pairs))
        and (limits.max_segments is None or len(pairs) <= limits.max_segments)
        and (limits.max_rows is None or (cu_q[-1] <= limits.max_rows and cu_k[-1] <= limits.max_rows))
    )
    if fits:
        return CallPlan(direct=True, calls=())
    pieces = [
        piece
        for index, (qa, qb, ka, kb) in enumerate(non_empty)
        for piece in _pair_pieces(index, qa, qb, ka, kb, causal, limits.max_rows)
    ]
    # First fit over open calls: a piece joins the first call of its mask kind with room and without its query rows.
    open_calls: list[dict] = []
    for piece in pieces:
        for call in open_calls:
            if (
                call["causal"] == piece.causal
                and piece.query_block not in call["owners"]
                and (limits.max_segments is None or len(call["pieces"]) < limits.max_segments)
                and (limits.max_rows is None or (
                    call["q_rows"] + piece.qb - piece.qa <= limits.max_rows
                    and call["k_rows"] + piece.kb - piece.ka <= limits.max_rows))
            ):
                break
        else:
            call = {"causal": piece.causal, "owners": set(), "pieces": [], "q_rows": 0, "k_rows": 0}
            open_calls.append(call)
        call["owners"].add(piece.query_block)
        call["pieces"].append(piece)
        call["q_rows"] += piece.qb - piece.qa
        call["k_rows"] += piece.kb - piece.ka
    return CallPlan(direct=False, calls=tuple(_kernel_call(call["pieces"], call["causal"]) for call in open_calls))


def _kernel_call(pieces: list[_Piece], causal: bool) -> KernelCall:
    query_rows = torch.cat([torch.arange(p.qa, p.qb) for p in pieces])
    key_rows = torch.cat([torch.arange(p.ka, p.kb) for p in pieces])
    cu_q, cu_k = [0], [0]
    for piece in pieces:
        cu_q.append(cu_q[-1] + piece.qb - piece.qa)
        cu_k.append(cu_k[-1] + piece.kb - piece.ka)
    return KernelCall(query_rows, key_rows, VarlenSegments(tuple(cu_q), tuple(cu_k)), causal)


class LimitedKernel:
    """A kernel whose calls are split to fit `limits`; same contract as :class:`AttentionKernel`."""

    def __init__(self, kernel: AttentionKernel, limits: KernelLimits) -> None:
        self.kernel = kernel
        self.limits = limits
        self.name = kernel.name

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, *,
        causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        plan = plan_calls(segments, causal, self.limits)
        if plan.direct:
            return self.kernel.forward(q, k, v, segments, causal=causal, softmax_scale=softmax_scale)
        acc = torch.promote_types(q.dtype, torch.float32)
        out = torch.zeros(q.shape, dtype=acc, device=q.device)
        lse = torch.full(q.shape[:2], float("-inf"), dtype=acc, device=q.device)
        for call in plan.calls:
            rows, keys = call.query_rows.to(q.device), call.key_rows.to(q.device)
            # [t_call, heads, d] gathered; merged back into the invocation's rows below.
            block_out, block_lse = self.kernel.forward(
                q.index_select(0, rows), k.index_select(0, keys), v.index_select(0, keys), call.segments,
                causal=call.causal, softmax_scale=softmax_scale,
            )
            old_out, old_lse = out.index_select(0, rows), lse.index_select(0, rows)
            new_lse = torch.logaddexp(old_lse, block_lse.to(acc))
            shift = new_lse.masked_fill(torch.isneginf(new_lse), 0.0)
            merged = old_out * torch.exp(old_lse - shift).unsqueeze(-1) + block_out.to(acc) * torch.exp(
                block_lse.to(acc) - shift).unsqueeze(-1)
            out.index_copy_(0, rows, merged)
            lse.index_copy_(0, rows, new_lse)
        return out.to(q.dtype), lse

    def backward(
        self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, segments: VarlenSegments, *, causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        plan = plan_calls(segments, causal, self.limits)
        if plan.direct:
            return self.kernel.backward(dout, q, k, v, out, lse, segments, causal=causal, softmax_scale=softmax_scale)
        acc = torch.promote_types(q.dtype, torch.float32)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        for call in plan.calls:
            rows, keys = call.query_rows.to(q.device), call.key_rows.to(q.device)
            grads = self.kernel.backward(
                dout.index_select(0, rows), q.index_select(0, rows), k.index_select(0, keys),
                v.index_select(0, keys), out.index_select(0, rows), lse.index_select(0, rows), call.segments,
                causal=call.causal, softmax_scale=softmax_scale,
            )
            dq.index_add_(0, rows, grads[0].to(acc))
            dk.index_add_(0, keys, grads[1].to(acc))
            dv.index_add_(0, keys, grads[2].to(acc))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


__all__ = ["CallPlan", "KernelCall", "KernelLimits", "LimitedKernel", "plan_calls"]
