"""Hybrid attention: Ulysses inside blocks of u consecutive group ranks, ring attention across the r blocks.

A group of degree d = u x r holds the per-document zigzag over d ranks: rank k holds chunks k and 2d-1-k of
the 2d chunks of every document. Block i (group ranks i*u .. i*u+u-1) then holds chunks i*u .. i*u+u-1 and
their mirror images: one contiguous front run and one back run of every document, front before back, which
is shard i of the zigzag over r shards with blocks of u ranks merged (`zigzag_layout(cu, r, block=u)`; not
the plain zigzag over r ranks, whose chunk boundaries differ wherever 2d does not divide a document).

Forward: an all-to-all inside the block gives each of its ranks heads / u of the heads for the whole block
shard, put in the merged shard's order; rank j of every block holds the same head slice, and those r ranks
run ring attention over the merged layout; the reverse all-to-all brings the output back. The backward
mirrors it: the output gradient goes to heads, the ring's backward runs, the q/k/v gradients come back.
K/V heads are repeated as Ulysses repeats them (`kv_repeat_factor` over u).
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import torch

from mindspeed_mm.core.fcp.parallel.attention_call import AttentionCall
from mindspeed_mm.core.fcp.parallel.collectives import CommStats
from mindspeed_mm.core.fcp.parallel.hybrid_group import HybridGroup
from mindspeed_mm.core.fcp.parallel.ring import ring_backward, ring_forward
from mindspeed_mm.core.fcp.parallel.ulysses import (
    HeadExchange, head_split_attention, head_to_seq, repeated_kv, seq_to_head, sum_kv_repeats,
)
from mindspeed_mm.core.fcp.parallel.zigzag import zigzag_layout


@lru_cache(maxsize=256)
def _block_orders(cu_seqlens: tuple[int, ...], ulysses_degree: int, ring_degree: int,
                  block: int) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor]:
    """(rows of each member's shard, merged-shard order, member order) of one block's exchange."""
    fine = zigzag_layout(cu_seqlens, ulysses_degree * ring_degree)
    merged = zigzag_layout(cu_seqlens, ring_degree, block=ulysses_degree).shard(block)
    members = [fine.shard(block * ulysses_degree + j) for j in range(ulysses_degree)]
    # [sum of member rows]: packed-batch token of each row of the members' shards concatenated.
    concatenated = torch.cat([member.global_index for member in members])
    row_of_token = torch.full((fine.total_tokens,), -1, dtype=torch.int64)
    row_of_token[concatenated] = torch.arange(concatenated.numel(), dtype=torch.int64)
    to_merged = row_of_token[merged.global_index]
    if to_merged.numel() != concatenated.numel() or bool((to_merged < 0).any()):
        raise AssertionError(f"block {block} of a {ulysses_degree} x {ring_degree} group does not hold its merged shard")
    to_members = torch.empty_like(to_merged)
    to_members[to_merged] = torch.arange(to_merged.numel(), dtype=torch.int64)
    return tuple(member.length for member in members), to_merged, to_members


def _parts(call: AttentionCall, stats: CommStats) -> tuple[HeadExchange, AttentionCall]:
    """The block's all-to-all and the ring's call (on the merged layout, its bytes counted in `stats`)."""
    hybrid = call.group
    assert isinstance(hybrid, HybridGroup)
    u, r, block = hybrid.ulysses_degree, hybrid.ring_degree, hybrid.ring_rank
    lengths, to_merged, to_members = _block_orders(call.layout.cu_seqlens, u, r, block)
    exchange = HeadExchange(hybrid.ulysses_group, hybrid.ulysses_rank, lengths, to_merged, to_members)
    ring = dataclasses.replace(call, group=hybrid.ring_group, rank=block,
                               layout=zigzag_layout(call.layout.cu_seqlens, r, block=u), stats=stats)
    return exchange, ring


def hybrid_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """This rank's output and the head-sharded tensors the backward needs (q, k, v, out, lse)."""
    ring_stats = CommStats()
    exchange, ring = _parts(call, ring_stats)
    k, v = repeated_kv(k, v, q.shape[1], exchange.members)
    # [t_k, h, d] on each block member -> [t_block, h / u, d] in the merged shard's order.
    (q_h, k_h, v_h), sent_in = seq_to_head([q, k, v], exchange)
    out_h, lse_h = ring_forward(q_h, k_h, v_h, ring)
    # [t_block, h / u, d] -> this rank's [t_k, h, d].
    (out,), sent_out = head_to_seq([out_h], exchange)
    call.record(sent_in + ring_stats.forward_bytes_sent + sent_out, backward=False)
    return out, (q_h, k_h, v_h, out_h, lse_h)


def hybrid_backward(
    dout: torch.Tensor, saved: tuple[torch.Tensor, ...], kv_heads: int, call: AttentionCall
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of this rank's q, k, v (k and v with ``kv_heads`` heads)."""
    q_h, k_h, v_h, out_h, lse_h = saved
    ring_stats = CommStats()
    exchange, ring = _parts(call, ring_stats)
    # [t_k, h, d] -> [t_block, h / u, d], as the forward's q.
    (dout_h,), sent_in = seq_to_head([dout.contiguous()], exchange)
    dq_h, dk_h, dv_h = ring_backward(dout_h, q_h, k_h, v_h, out_h, lse_h, ring)
    # [t_block, h / u, d] -> [t_k, h, d] (K/V with their repeated heads).
    (dq, dk, dv), sent_out = head_to_seq([dq_h, dk_h, dv_h], exchange)
    call.record(sent_in + ring_stats.backward_bytes_sent + sent_out, backward=True)
    dk, dv = sum_kv_repeats(dk, dv, kv_heads)
    return dq, dk, dv


HybridAttention = head_split_attention("HybridAttention", hybrid_forward, hybrid_backward)
