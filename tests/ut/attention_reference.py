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


def dense_case(cu_seqlens: Sequence[int], heads: int, kv_heads: int, head_dim: int, *, causal: bool,
               seed: int) -> tuple[list[torch.Tensor], torch.Tensor, list[torch.Tensor]]:
    """Random float64 (q, k, v) and output gradient of a packed batch, and the unsharded reference's output and
    q / k / v gradients."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v, dout = (torch.randn(cu_seqlens[-1], n, head_dim, dtype=torch.float64, generator=generator)
                     for n in (heads, kv_heads, kv_heads, heads))
    full = [x.clone().requires_grad_() for x in (q, k, v)]
    out = dense_attention(*full, cu_seqlens, causal=causal)
    out.backward(dout)
    return [q, k, v], dout, [out.detach()] + [x.grad for x in full]


BF16_ROUNDING = 2.0 ** -8
"""bf16 keeps 8 bits of mantissa: one rounding of a value x is up to 2^-8 |x|."""


def unsharded_bf16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, cu: list[int],
                   causal: bool, kernel: str | None = None) -> list[torch.Tensor]:
    """Output and q / k / v gradients of one process attending the whole batch in bf16 with FCP's `kernel`."""
    from mindspeed_mm.core.fcp.parallel import fcp_attention

    full = [x.to(torch.bfloat16).requires_grad_() for x in (q, k, v)]
    out = fcp_attention(*full, cu, group=None, causal=causal, kernel=kernel)
    out.backward(dout.to(torch.bfloat16))
    return [out.detach()] + [x.grad for x in full]


def within_bf16_of_one_process(got: torch.Tensor, want: torch.Tensor, one_process: torch.Tensor, what: str) -> None:
    """bf16: the sharded result is off the float64 reference by no more than one process in bf16 is (twice its
    error, plus one rounding of the largest value): sharding adds no error beyond bf16's own."""
    if want.numel() == 0:
        assert got.numel() == 0, what
        return
    error = float((got.detach().double() - want).abs().max())
    allowed = 2 * float((one_process.double() - want).abs().max()) + BF16_ROUNDING * float(want.abs().max())
    assert error <= allowed, f"{what}: bf16 error {error:.3g} above {allowed:.3g} (one process: twice its error)"
