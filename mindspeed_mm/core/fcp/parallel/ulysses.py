"""Ulysses attention: all-to-all from sequence-sharded to head-sharded, full-length attention, back.

Each rank receives every rank's zigzag shard for ``heads / degree`` query heads (and the matching
K/V heads); the rows arrive grouped by source rank, are put back in packed-batch order with the
layout's unshard permutation, attend with the group's global ``cu_seqlens``, and return the same way.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

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


@dataclass(frozen=True)
class HeadExchange:
    """The all-to-all between sequence shards and head shards over one process group.

    Members hold sequence shards (member ``c`` holds ``shard_lengths[c]`` rows, every head); after the
    exchange each holds every member's rows for ``1 / members`` of the heads, in the order a kernel attends
    them (``to_attention_order``).
    """

    group: dist.ProcessGroup | None
    """Process group of the members (None: one member, nothing moves)."""
    rank: int
    """This rank's index among the members."""
    shard_lengths: tuple[int, ...]
    """Rows each member holds before the exchange."""
    to_attention_order: torch.Tensor
    """``[sum(shard_lengths)]``: for each row in attention order, its row in the members' shards concatenated."""
    to_member_order: torch.Tensor
    """Inverse of ``to_attention_order``: for each row of the concatenated shards, its row in attention order."""

    @property
    def members(self) -> int:
        """Ranks taking part in the exchange."""
        return len(self.shard_lengths)

    @classmethod
    def over_group(cls, call: AttentionCall) -> "HeadExchange":
        """Ulysses over the whole group: attention order is the packed batch's order."""
        layout = call.layout
        return cls(call.group, call.rank, tuple(shard.length for shard in layout.shards), layout.unshard_index,
                   layout.shard_order)


def seq_to_head(tensors: list[torch.Tensor], exchange: HeadExchange) -> tuple[list[torch.Tensor], int]:
    """``[t_r, h_i, d]`` shards -> ``[total, h_i / members, d]`` in attention order; also the bytes sent."""
    members = exchange.members
    t_local = tensors[0].shape[0]
    head_counts = [x.shape[1] // members for x in tensors]
    # [t_r, h_i, d] -> [t_r, members, h_i/members, d], concatenated over i along the per-rank heads.
    packed = torch.cat([x.reshape(t_local, members, n, x.shape[2]) for x, n in zip(tensors, head_counts)], dim=2)
    # [members, t_r, sum_i h_i/members, d] flattened: block c goes to member c.
    send = packed.transpose(0, 1).reshape(members * t_local, *packed.shape[2:])
    received, nbytes = all_to_all_rows(send, [t_local] * members, exchange.shard_lengths, exchange.group)
    # [sum_c t_c, sum_i h_i/members, d], member c's rows at c's offset -> attention order.
    ordered = received.index_select(0, exchange.to_attention_order.to(received.device))
    return list(torch.split(ordered, head_counts, dim=1)), nbytes


def head_to_seq(tensors: list[torch.Tensor], exchange: HeadExchange) -> tuple[list[torch.Tensor], int]:
    """Inverse of :func:`seq_to_head`: ``[total, h_i / members, d]`` -> this rank's ``[t_r, h_i, d]``."""
    members, lengths = exchange.members, exchange.shard_lengths
    head_counts = [x.shape[1] for x in tensors]
    packed = torch.cat(tensors, dim=1)
    own = lengths[exchange.rank]
    # [total, sum_i h_i/members, d] in member order: member c's rows go back to member c.
    received, nbytes = all_to_all_rows(
        packed.index_select(0, exchange.to_member_order.to(packed.device)), lengths, [own] * members, exchange.group
    )
    # [members * t_r, sum_i h_i/members, d] -> [t_r, members, sum_i h_i/members, d]
    per_rank = received.reshape(members, own, *packed.shape[1:]).transpose(0, 1)
    pieces = torch.split(per_rank, head_counts, dim=2)
    return [piece.reshape(piece.shape[0], piece.shape[1] * piece.shape[2], piece.shape[3]) for piece in pieces], nbytes


def repeated_kv(k: torch.Tensor, v: torch.Tensor, heads: int, members: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V with their heads repeated (``kv_repeat_factor``) so that ``members`` ranks split them evenly."""
    repeat = kv_repeat_factor(heads, k.shape[1], members)
    if repeat > 1:
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    return k, v


def sum_kv_repeats(dk: torch.Tensor, dv: torch.Tensor, kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of K and V with ``kv_heads`` heads from those of their repeated copies."""
    repeat = dk.shape[1] // kv_heads
    if repeat > 1:
        # [t, kv_heads * repeat, d] -> [t, kv_heads, repeat, d]: sum the copies of each kv head.
        dk = dk.reshape(dk.shape[0], kv_heads, repeat, dk.shape[2]).sum(dim=2)
        dv = dv.reshape(dv.shape[0], kv_heads, repeat, dv.shape[2]).sum(dim=2)
    return dk, dv


def _global_segments(call: AttentionCall) -> VarlenSegments:
    return VarlenSegments(call.layout.cu_seqlens, call.layout.cu_seqlens)


def ulysses_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """This rank's output and the head-sharded tensors the backward needs (q, k, v, out, lse)."""
    k, v = repeated_kv(k, v, q.shape[1], call.degree)
    exchange = HeadExchange.over_group(call)
    (q_h, k_h, v_h), sent_in = seq_to_head([q, k, v], exchange)
    out_h, lse_h = call.kernel.forward(
        q_h, k_h, v_h, _global_segments(call), causal=call.causal, softmax_scale=call.softmax_scale
    )
    (out,), sent_out = head_to_seq([out_h], exchange)
    call.record(sent_in + sent_out, backward=False)
    return out, (q_h, k_h, v_h, out_h, lse_h)


def ulysses_backward(
    dout: torch.Tensor, saved: tuple[torch.Tensor, ...], kv_heads: int, call: AttentionCall
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of this rank's q, k, v (k and v with ``kv_heads`` heads)."""
    q_h, k_h, v_h, out_h, lse_h = saved
    exchange = HeadExchange.over_group(call)
    (dout_h,), sent_in = seq_to_head([dout.contiguous()], exchange)
    dq_h, dk_h, dv_h = call.kernel.backward(
        dout_h, q_h, k_h, v_h, out_h, lse_h, _global_segments(call),
        causal=call.causal, softmax_scale=call.softmax_scale,
    )
    (dq, dk, dv), sent_out = head_to_seq([dq_h, dk_h, dv_h], exchange)
    call.record(sent_in + sent_out, backward=True)
    dk, dv = sum_kv_repeats(dk, dv, kv_heads)
    return dq, dk, dv


def head_split_attention(name: str, forward: Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, ...]]],
                         backward: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
                         ) -> type[torch.autograd.Function]:
    """An autograd function of an attention that exchanges heads: `forward(q, k, v, call)` gives (out, tensors to
    save), `backward(dout, saved, kv_heads, call)` the gradients of q, k, v (k and v with `kv_heads` heads)."""
    def run_forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> torch.Tensor:
        out, saved = forward(q, k, v, call)
        ctx.save_for_backward(*saved)
        ctx.call = call
        ctx.kv_heads = k.shape[1]
        return out

    def run_backward(ctx, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        dq, dk, dv = backward(dout, ctx.saved_tensors, ctx.kv_heads, ctx.call)
        return dq, dk, dv, None

    return type(name, (torch.autograd.Function,), {
        "__doc__": f"Autograd wrapper of :func:`{forward.__name__}` / :func:`{backward.__name__}`.",
        "forward": staticmethod(run_forward), "backward": staticmethod(run_backward)})


UlyssesAttention = head_split_attention("UlyssesAttention", ulysses_forward, ulysses_backward)
