"""Ascend backend on ``torch_npu.npu_fusion_attention`` (TND layout). Imported only when selected.

Softmax statistics: the kernel returns ``softmax_max`` / ``softmax_sum`` as ``[T, N, 8]`` float32 (the value
repeated 8 times), by default in NTD order inside each query segment: the ``N * s`` rows of a segment of
``s`` tokens hold head 0's ``s`` tokens, then head 1's, ... (torch_npu's `npu_fusion_attention` docs,
parameter ``softmax_layout``; MindSpeed reads them so in `flatten_softmax` / `unflatten_softmax`).
``softmax_layout="TND"`` (torch_npu 7.2.0 with CANN 8.3.RC1) returns them token-major instead, and the
gradient op reads its ``softmax_max`` / ``softmax_sum`` inputs in the layout its own ``softmax_layout`` names.
This adapter asks for TND where the installed torch_npu accepts it, and converts per segment otherwise.
"""
from __future__ import annotations

import inspect
import logging
from functools import lru_cache
from typing import Any

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import VarlenSegments
from mindspeed_mm.core.fcp.parallel.kernels.limits import KernelLimits

logger = logging.getLogger(__name__)

_STAT_COPIES = 8
# sparse_mode 3 = causal aligned to the bottom-right corner, with the compressed 2048 x 2048 mask.
_CAUSAL_SPARSE_MODE = 3
_CAUSAL_MASK_SIZE = 2048
NPU_FUSION_LIMITS = KernelLimits(max_rows=1 << 20, max_segments=1024, accepts_empty_segments=False)
"""torch_npu docs, constraints of `npu_fusion_attention`: varlen T (and every S) in 1..1M, at most 1K entries
in `actual_seq_qlen`; segments of length 0 are documented for queries only, so no empty pair is sent."""


def _parameter_names(function: Any, op_name: str) -> set[str] | None:
    """Parameter names of a torch_npu operator: from its Python signature, else from its registered schema."""
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        pass
    try:
        schema = getattr(torch.ops.npu, op_name).default._schema
    except (AttributeError, RuntimeError):
        return None
    return {argument.name for argument in schema.arguments}


def accepts_tnd_statistics(torch_npu: Any) -> bool:
    """Whether both the forward and the gradient operator take ``softmax_layout``."""
    for op_name in ("npu_fusion_attention", "npu_fusion_attention_grad"):
        names = _parameter_names(getattr(torch_npu, op_name), op_name)
        if names is None or "softmax_layout" not in names:
            return False
    return True


@lru_cache(maxsize=256)
def _ntd_rows(cu_seqlens: tuple[int, ...], heads: int) -> torch.Tensor:
    """``[T, heads]``: the row of the kernel's NTD statistics holding (token, head)."""
    cu = torch.tensor(cu_seqlens, dtype=torch.int64)
    lengths = cu[1:] - cu[:-1]
    starts = cu[:-1].repeat_interleave(lengths)  # [T]: first token of each token's segment
    token_lengths = lengths.repeat_interleave(lengths)
    offsets = torch.arange(int(cu[-1])) - starts
    return (starts * heads + offsets).unsqueeze(1) + torch.arange(heads).unsqueeze(0) * token_lengths.unsqueeze(1)


class NpuFusionAttentionKernel:
    """Wraps ``npu_fusion_attention`` / ``npu_fusion_attention_grad`` with the varlen TND layout."""

    name = "npu_fusion"
    limits = NPU_FUSION_LIMITS

    def __init__(self, torch_npu: Any = None, tnd_statistics: bool | None = None) -> None:
        """`torch_npu`: the module (default: imported); `tnd_statistics`: pass ``softmax_layout="TND"`` (True)
        or convert NTD statistics per segment (False); None: TND where the installed torch_npu accepts it."""
        if torch_npu is None:
            import torch_npu
        self._torch_npu = torch_npu
        self.tnd_statistics = accepts_tnd_statistics(torch_npu) if tnd_statistics is None else tnd_statistics
        logger.debug("npu_fusion: softmax statistics %s", "TND" if self.tnd_statistics else "NTD, converted")
        self._causal_mask: torch.Tensor | None = None

    def _mask_args(self, device: torch.device, causal: bool) -> dict:
        if not causal:
            return {"atten_mask": None, "sparse_mode": 0}
        if self._causal_mask is None or self._causal_mask.device != device:
            self._causal_mask = torch.ones(
                _CAUSAL_MASK_SIZE, _CAUSAL_MASK_SIZE, dtype=torch.bool, device=device
            ).triu(diagonal=1)
        return {"atten_mask": self._causal_mask, "sparse_mode": _CAUSAL_SPARSE_MODE}

    def _layout_args(self) -> dict:
        return {"softmax_layout": "TND"} if self.tnd_statistics else {}

    def _token_major(self, statistic: torch.Tensor, segments: VarlenSegments) -> torch.Tensor:
        """The kernel's ``[T, N, 8]`` statistic as ``[T, N]`` in (token, head) order."""
        values = statistic[..., 0]
        if self.tnd_statistics:
            return values
        rows = _ntd_rows(segments.cu_seqlens_q, values.shape[1]).to(values.device)
        return values.reshape(-1)[rows]

    def _kernel_layout(self, values: torch.Tensor, segments: VarlenSegments) -> torch.Tensor:
        """``[T, N]`` token-major values as the kernel's ``[T, N, 8]`` statistic."""
        if not self.tnd_statistics:
            rows = _ntd_rows(segments.cu_seqlens_q, values.shape[1]).to(values.device)
            native = torch.empty(values.numel(), dtype=values.dtype, device=values.device)
            native[rows.reshape(-1)] = values.reshape(-1)
            values = native.view(values.shape)
        return values.unsqueeze(-1).expand(*values.shape, _STAT_COPIES).contiguous()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, *,
        causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = self._torch_npu.npu_fusion_attention(
            q, k, v, q.shape[1], "TND", scale=softmax_scale, keep_prob=1.0,
            actual_seq_qlen=list(segments.cu_seqlens_q[1:]), actual_seq_kvlen=list(segments.cu_seqlens_k[1:]),
            **self._mask_args(q.device, causal), **self._layout_args(),
        )
        out, softmax_max, softmax_sum = result[0], result[1], result[2]
        lse = self._token_major(softmax_max, segments) + torch.log(self._token_major(softmax_sum, segments))
        return out, lse.float()

    def backward(
        self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, segments: VarlenSegments, *, causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # With max = lse and sum = 1 the kernel rebuilds P = exp(S - lse), the merged softmax.
        softmax_max = self._kernel_layout(lse.float(), segments)
        softmax_sum = torch.ones_like(softmax_max)
        grads = self._torch_npu.npu_fusion_attention_grad(
            q, k, v, dout, q.shape[1], "TND", softmax_max=softmax_max, softmax_sum=softmax_sum,
            attention_in=out, scale_value=softmax_scale, keep_prob=1.0,
            actual_seq_qlen=list(segments.cu_seqlens_q[1:]), actual_seq_kvlen=list(segments.cu_seqlens_k[1:]),
            **self._mask_args(q.device, causal), **self._layout_args(),
        )
        return grads[0], grads[1], grads[2]
