"""flash-attn varlen backend (CUDA). Imported only when selected; needs the `flash_attn` package."""
from __future__ import annotations

import inspect

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import VarlenSegments


class FlashAttnVarlenKernel:
    """Wraps ``flash_attn_varlen_func`` (forward) and ``_flash_attn_varlen_backward`` (backward)."""

    name = "flash_attn"

    def __init__(self) -> None:
        from flash_attn import flash_attn_interface

        self._interface = flash_attn_interface
        self._backward_params = set(inspect.signature(flash_attn_interface._flash_attn_varlen_backward).parameters)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, *,
        causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cu_q, cu_k = segments.cu_tensors(q.device)
        out, lse, _ = self._interface.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, segments.max_seqlen_q, segments.max_seqlen_k,
            softmax_scale=softmax_scale, causal=causal, return_attn_probs=True,
        )
        # flash-attn writes +inf for rows without keys (so its backward yields 0); merging wants -inf.
        lse = lse.transpose(0, 1).float()
        return out, lse.masked_fill(torch.isposinf(lse), float("-inf"))

    def backward(
        self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, segments: VarlenSegments, *, causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cu_q, cu_k = segments.cu_tensors(q.device)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        kwargs = dict(
            dout=dout.contiguous(), q=q, k=k, v=v, out=out, softmax_lse=lse.transpose(0, 1).float().contiguous(),
            dq=dq, dk=dk, dv=dv, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
            max_seqlen_q=segments.max_seqlen_q, max_seqlen_k=segments.max_seqlen_k,
            dropout_p=0.0, softmax_scale=softmax_scale, causal=causal, alibi_slopes=None,
            deterministic=False, rng_state=None,
        )
        # The window / softcap arguments changed names across flash-attn 2.x releases.
        optional = {"window_size": (-1, -1), "window_size_left": -1, "window_size_right": -1, "softcap": 0.0}
        kwargs.update({name: value for name, value in optional.items() if name in self._backward_params})
        self._interface._flash_attn_varlen_backward(**kwargs)
        return dq, dk, dv
