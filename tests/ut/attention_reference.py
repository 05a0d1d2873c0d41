"""Unsharded single-process attention of a packed varlen batch, written independently of the kernels."""
from __future__ import annotations

from collections.abc import Sequence

import torch


def document_ids(cu_seqlens: Sequence[int]) -> torch.Tensor:
    """``[total]`` index of the document of every packed token."""
    lengths = torch.tensor([b - a for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:])])
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: Sequence[int], *, causal: bool,
    softmax_scale: float | None = None,
) -> torch.Tensor:
    """Masked dense softmax attention over the whole packed batch (differentiable by autograd)."""
    heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
    scale = head_dim ** -0.5 if softmax_scale is None else softmax_scale
    group = heads // kv_heads
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    docs = document_ids(cu_seqlens)
    visible = docs.unsqueeze(1) == docs.unsqueeze(0)
    if causal:
        # Packed order is position order inside a document.
        visible &= torch.ones_like(visible).tril()
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)
