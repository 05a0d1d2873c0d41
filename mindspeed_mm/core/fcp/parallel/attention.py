"""``fcp_attention``: exact attention of one CP group's zigzag-sharded packed batch."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.attention_call import AttentionCall
from mindspeed_mm.core.fcp.parallel.collectives import CommStats
from mindspeed_mm.core.fcp.parallel.hybrid import HybridAttention
from mindspeed_mm.core.fcp.parallel.hybrid_group import HybridGroup
from mindspeed_mm.core.fcp.parallel.kernels import AUTO, get_kernel, resolve_kernel_name
from mindspeed_mm.core.fcp.parallel.ring import RingAttention
from mindspeed_mm.core.fcp.parallel.ulysses import UlyssesAttention, kv_repeat_factor
from mindspeed_mm.core.fcp.parallel.zigzag import CuSeqlens, zigzag_layout

ATTENTION_ALGOS: dict[str, type[torch.autograd.Function]] = {
    "ring": RingAttention,
    "ulysses": UlyssesAttention,
    "hybrid": HybridAttention,
}
HYBRID = "hybrid"

AttentionGroup = dist.ProcessGroup | HybridGroup | None
"""What `fcp_attention` attends over: the CP group's process group (ring, Ulysses), its `HybridGroup`
(hybrid), or None (one rank)."""


def _group_rank_and_size(group: AttentionGroup, algo: str) -> tuple[int, int]:
    if isinstance(group, HybridGroup) != (algo == HYBRID):
        raise ValueError(f"algo {algo!r} needs {'a HybridGroup' if algo == HYBRID else 'a process group or None'} "
                         f"as group, got {type(group).__name__}")
    if isinstance(group, HybridGroup):
        return group.rank, group.degree
    if group is None:
        return 0, 1
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"this process (global rank {dist.get_rank()}) is not a member of the group passed in")
    return rank, dist.get_world_size(group)


def _check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shard_len: int, rank: int) -> None:
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dim() != 3:
            raise ValueError(f"{name} must be [tokens, heads, head_dim], got shape {tuple(tensor.shape)}")
        if tensor.shape[0] != shard_len:
            raise ValueError(
                f"{name} has {tensor.shape[0]} tokens but rank {rank}'s zigzag shard of cu_seqlens holds {shard_len}"
            )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k head_dim differ: {q.shape[2]} vs {k.shape[2]}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"heads ({q.shape[1]}) must be a multiple of kv_heads ({k.shape[1]})")
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k, v must share dtype and device, got {q.dtype}/{k.dtype}/{v.dtype} on {q.device}/{k.device}/{v.device}"
        )


def fcp_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: CuSeqlens,
    *,
    group: AttentionGroup,
    algo: str = "ring",
    causal: bool = True,
    softmax_scale: float | None = None,
    kernel: str | None = None,
    comm_stats: CommStats | None = None,
) -> torch.Tensor:
    """This rank's shard of the attention output of the group's packed batch; differentiable in q, k, v.

    q ``[t, heads, head_dim]`` and k, v ``[t, kv_heads, head_dim]`` are this rank's ``zigzag_shard``
    of the packed batch whose documents ``cu_seqlens`` delimits (same on every rank of ``group``).
    Attention never crosses a document boundary. ``group`` is the CP group (``None``: local attention
    without torch.distributed, as for a group of one); for ``algo="hybrid"`` its `HybridGroup` (Ulysses inside
    blocks of consecutive group ranks, ring across the blocks). ``kernel`` names the local kernel (a value of
    ``fcp_attention_kernel``; default ``auto``: by device). ``comm_stats`` accumulates the bytes this rank
    sends, forward and backward.
    """
    if algo not in ATTENTION_ALGOS:
        raise ValueError(f"unknown algo {algo!r}; choose one of {sorted(ATTENTION_ALGOS)}")
    rank, degree = _group_rank_and_size(group, algo)
    layout = zigzag_layout(cu_seqlens, degree)
    _check_tensors(q, k, v, layout.shard(rank).length, rank)
    if algo == "ulysses":
        kv_repeat_factor(q.shape[1], k.shape[1], degree)
    elif algo == HYBRID:
        kv_repeat_factor(q.shape[1], k.shape[1], group.ulysses_degree)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[2])
    call = AttentionCall(
        group=group,
        rank=rank,
        layout=layout,
        causal=causal,
        softmax_scale=float(softmax_scale),
        kernel=get_kernel(resolve_kernel_name(kernel or AUTO, q.device)),
        stats=comm_stats,
    )
    return ATTENTION_ALGOS[algo].apply(q, k, v, call)
