"""Ulysses attention: all-to-all from sequence-sharded to head-sharded, full-length attention, back.

Each rank receives every rank's zigzag shard for ``heads / degree`` query heads (and the matching
K/V heads); the rows arrive grouped by source rank, are put back in packed-batch order with the
layout's unshard permutation, attend with the group's global ``cu_seqlens``, and return the same way.
"""
from __future__ import annotations

import torch

from mindspeed_mm.core.fcp.parallel.attention_call import AttentionCall
from mindspeed_mm.core.fcp.parallel.collectives import all_to_all_rows
from mindspeed_mm.core.fcp.parallel.kernels import VarlenSegments


def kv_repeat_factor(heads: int, kv_heads: int, degree: int) -> int:
    """Smallest repetition of the K/V heads that lets ``degree`` ranks split them evenly.

    Raises ValueError when ``heads`` is not a multiple of ``degree`` (or of ``kv_heads``).
    """
    if heads % kv_heads != 0:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if heads % degree != 0:
        raise ValueError(
            f"ulysses needs heads divisible by the degree: heads={heads}, kv_heads={kv_heads}, degree={degree}"
        )
    group = heads // kv_heads
    return next(r for r in range(1, group + 1) if group % r == 0 and (kv_heads * r) % degree == 0)


def _seq_to_head(tensors: list[torch.Tensor], call: AttentionCall) -> tuple[list[torch.Tensor], int]:
    """``[t_r, h_i, d]`` shards -> ``[total, h_i / degree, d]`` in packed-batch order; also bytes sent."""
    degree, layout = call.degree, call.layout
    t_local = tensors[0].shape[0]
    head_counts = [x.shape[1] // degree for x in tensors]
    # [t_r, h_i, d] -> [t_r, degree, h_i/degree, d], concatenated over i along the per-rank heads.
    packed = torch.cat([x.reshape(t_local, degree, n, x.shape[2]) for x, n in zip(tensors, head_counts)], dim=2)
    # [degree, t_r, sum_i h_i/degree, d] flattened: block c goes to rank c.
    send = packed.transpose(0, 1).reshape(degree * t_local, *packed.shape[2:])
    lengths = [shard.length for shard in layout.shards]
    received, nbytes = all_to_all_rows(send, [t_local] * degree, lengths, call.group)
    ordered = received.index_select(0, layout.unshard_index.to(received.device))
    return list(torch.split(ordered, head_counts, dim=1)), nbytes


def _head_to_seq(tensors: list[torch.Tensor], call: AttentionCall) -> tuple[list[torch.Tensor], int]:
    """Inverse of :func:`_seq_to_head`: ``[total, h_i / degree, d]`` -> this rank's ``[t_r, h_i, d]``."""
    degree, layout = call.degree, call.layout
    head_counts = [x.shape[1] for x in tensors]
    packed = torch.cat(tensors, dim=1)
    lengths = [shard.length for shard in layout.shards]
    received, nbytes = all_to_all_rows(
        packed.index_select(0, layout.shard_order.to(packed.device)), lengths, [lengths[call.rank]] * degree, call.group
    )
    # [degree * t_r, sum_i h_i/degree, d] -> [t_r, degree, sum_i h_i/degree, d]
    per_rank = received.reshape(degree, lengths[call.rank], *packed.shape[1:]).transpose(0, 1)
    pieces = torch.split(per_rank, head_counts, dim=2)
    return [piece.reshape(piece.shape[0], piece.shape[1] * piece.shape[2], piece.shape[3]) for piece in pieces], nbytes


def _global_segments(call: AttentionCall) -> VarlenSegments:
    return VarlenSegments(call.layout.cu_seqlens, call.layout.cu_seqlens)


def ulysses_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """This rank's output and the head-sharded tensors the backward needs (q, k, v, out, lse)."""
    repeat = kv_repeat_factor(q.shape[1], k.shape[1], call.degree)
    if repeat > 1:
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    (q_h, k_h, v_h), sent_in = _seq_to_head([q, k, v], call)
    out_h, lse_h = call.kernel.forward(
        q_h, k_h, v_h, _global_segments(call), causal=call.causal, softmax_scale=call.softmax_scale
    )
    (out,), sent_out = _head_to_seq([out_h], call)
    call.record(sent_in + sent_out, backward=False)
    return out, (q_h, k_h, v_h, out_h, lse_h)


def ulysses_backward(
    dout: torch.Tensor, saved: tuple[torch.Tensor, ...], kv_heads: int, call: AttentionCall
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of this rank's q, k, v (k and v with ``kv_heads`` heads)."""
    q_h, k_h, v_h, out_h, lse_h = saved
    (dout_h,), sent_in = _seq_to_head([dout.contiguous()], call)
    dq_h, dk_h, dv_h = call.kernel.backward(
        dout_h, q_h, k_h, v_h, out_h, lse_h, _global_segments(call),
        causal=call.causal, softmax_scale=call.softmax_scale,
    )
    (dq, dk, dv), sent_out = _head_to_seq([dq_h, dk_h, dv_h], call)
    call.record(sent_in + sent_out, backward=True)
    repeat = dk.shape[1] // kv_heads
    if repeat > 1:
        # [t, kv_heads * repeat, d] -> [t, kv_heads, repeat, d]: sum the copies of each kv head.
        dk = dk.reshape(dk.shape[0], kv_heads, repeat, dk.shape[2]).sum(dim=2)
        dv = dv.reshape(dv.shape[0], kv_heads, repeat, dv.shape[2]).sum(dim=2)
    return dq, dk, dv


class UlyssesAttention(torch.autograd.Function):
    """Autograd wrapper of :func:`ulysses_forward` / :func:`ulysses_backward`."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> torch.Tensor:
        out, saved = ulysses_forward(q, k, v, call)
        ctx.save_for_backward(*saved)
        ctx.call = call
        ctx.kv_heads = k.shape[1]
        return out

    @staticmethod
    def backward(ctx, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        dq, dk, dv = ulysses_backward(dout, ctx.saved_tensors, ctx.kv_heads, ctx.call)
        return dq, dk, dv, None
