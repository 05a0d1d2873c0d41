"""Ascend backend on ``torch_npu.npu_fusion_attention`` (TND layout). Imported only when selected."""
from __future__ import annotations

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import VarlenSegments

# npu_fusion_attention keeps softmax statistics as 8 identical copies per (token, head).
_STAT_COPIES = 8
# sparse_mode 3 = causal aligned to the bottom-right corner, with a compressed 2048 x 2048 mask.
_CAUSAL_SPARSE_MODE = 3
_CAUSAL_MASK_SIZE = 2048


class NpuFusionAttentionKernel:
    """Wraps ``npu_fusion_attention`` / ``npu_fusion_attention_grad`` with the varlen TND layout."""

    name = "npu_fusion"

    def __init__(self) -> None:
        import torch_npu

        self._torch_npu = torch_npu
        self._causal_mask: torch.Tensor | None = None

    def _mask_args(self, device: torch.device, causal: bool) -> dict:
        if not causal:
            return {"atten_mask": None, "sparse_mode": 0}
        if self._causal_mask is None or self._causal_mask.device != device:
            self._causal_mask = torch.ones(
                _CAUSAL_MASK_SIZE, _CAUSAL_MASK_SIZE, dtype=torch.bool, device=device
            ).triu(diagonal=1)
        return {"atten_mask": self._causal_mask, "sparse_mode": _CAUSAL_SPARSE_MODE}

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, *,
        causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = self._torch_npu.npu_fusion_attention(
            q, k, v, q.shape[1], "TND", scale=softmax_scale, keep_prob=1.0,
            actual_seq_qlen=list(segments.cu_seqlens_q[1:]), actual_seq_kvlen=list(segments.cu_seqlens_k[1:]),
            **self._mask_args(q.device, causal),
        )
        out, softmax_max, softmax_sum = result[0], result[1], result[2]
        lse = (softmax_max[..., 0] + torch.log(softmax_sum[..., 0])).float()
        return out, lse

    def backward(
        self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, segments: VarlenSegments, *, causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # With max = lse and sum = 1 the kernel rebuilds P = exp(S - lse), the merged softmax.
        softmax_max = lse.float().unsqueeze(-1).expand(*lse.shape, _STAT_COPIES).contiguous()
        softmax_sum = torch.ones_like(softmax_max)
        grads = self._torch_npu.npu_fusion_attention_grad(
            q, k, v, dout, q.shape[1], "TND", softmax_max=softmax_max, softmax_sum=softmax_sum,
            attention_in=out, scale_value=softmax_scale, keep_prob=1.0,
            actual_seq_qlen=list(segments.cu_seqlens_q[1:]), actual_seq_kvlen=list(segments.cu_seqlens_k[1:]),
            **self._mask_args(q.device, causal),
        )
        return grads[0], grads[1], grads[2]
