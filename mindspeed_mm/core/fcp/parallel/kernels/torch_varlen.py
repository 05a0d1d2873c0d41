"""CUDA backend on torch's built-in varlen flash attention (``torch.nn.attention.varlen``, torch >= 2.10).

The forward is the public ``varlen_attn`` with ``return_aux=AuxRequest(lse=True)``; the backward is the
operator ``varlen_attn``'s own autograd calls (``aten._flash_attention_backward``), given the merged output
and log-sum-exp so that ring blocks get the gradient of the merged softmax. Both carry the log-sum-exp as
``[heads, tokens]``. Where ``varlen_attn`` has no ``enable_gqa`` (torch 2.10, 2.11), key/value heads are
repeated to the query heads and their gradients summed back.
"""
from __future__ import annotations

import inspect

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import VarlenSegments
from mindspeed_mm.core.fcp.parallel.kernels.limits import KernelLimits

_DTYPES = (torch.float16, torch.bfloat16)


class TorchVarlenKernel:
    """Wraps ``torch.nn.attention.varlen.varlen_attn`` and its flash backward."""

    name = "torch_varlen"
    limits = KernelLimits()

    def __init__(self, native_gqa: bool | None = None) -> None:
        """`native_gqa`: pass fewer key/value heads with ``enable_gqa`` (None: where ``varlen_attn`` takes it)."""
        from torch.nn.attention import varlen

        if not hasattr(torch.ops.aten, "_flash_attention_backward"):
            raise ImportError("this torch has no aten._flash_attention_backward")
        backward_arguments = {a.name for a in torch.ops.aten._flash_attention_backward.default._schema.arguments}
        self._window_backward = "window_size_left" in backward_arguments
        self._varlen_attn = varlen.varlen_attn
        self._aux = varlen.AuxRequest(lse=True)
        parameters = inspect.signature(varlen.varlen_attn).parameters
        self._window_mask = "window_size" in parameters  # torch >= 2.11; 2.10 takes is_causal
        self.native_gqa = ("enable_gqa" in parameters) if native_gqa is None else native_gqa

    @staticmethod
    def _check(q: torch.Tensor) -> None:
        if q.device.type != "cuda":
            raise ValueError(f"attention kernel torch_varlen runs on CUDA, got tensors on {q.device}")
        if q.dtype not in _DTYPES:
            raise ValueError(
                f"attention kernel torch_varlen takes float16 / bfloat16, got {q.dtype}: "
                "set fcp_attention_kernel: torch for this dtype")

    def _heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        group = q.shape[1] // k.shape[1]
        if group > 1 and not self.native_gqa:
            return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), group
        return k, v, 1

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, *,
        causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(q)
        k, v, _ = self._heads(q, k, v)
        cu_q, cu_k = segments.cu_tensors(q.device)
        mask = {"window_size": (-1, 0) if causal else (-1, -1)} if self._window_mask else {"is_causal": causal}
        gqa = {"enable_gqa": True} if self.native_gqa and k.shape[1] != q.shape[1] else {}
        out, lse = self._varlen_attn(
            q, k, v, cu_q, cu_k, segments.max_seqlen_q, segments.max_seqlen_k,
            return_aux=self._aux, scale=softmax_scale, **mask, **gqa,
        )
        # [heads, tokens] -> [tokens, heads]; rows without keys come back +inf, merging wants -inf.
        lse = lse.float().transpose(0, 1)
        return out, lse.masked_fill(torch.isposinf(lse), float("-inf"))

    def backward(
        self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, segments: VarlenSegments, *, causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self._check(q)
        kv_heads = k.shape[1]
        k, v, group = self._heads(q, k, v)
        cu_q, cu_k = segments.cu_tensors(q.device)
        no_dropout = torch.zeros(2, dtype=torch.uint64, device=q.device)
        window = {"window_size_left": -1, "window_size_right": 0 if causal else -1} if self._window_backward else {}
        dq, dk, dv = torch.ops.aten._flash_attention_backward(
            dout.contiguous(), q, k, v, out, lse.float().transpose(0, 1).contiguous(), cu_q, cu_k,
            segments.max_seqlen_q, segments.max_seqlen_k, 0.0, causal, no_dropout, torch.empty(0, device=q.device),
            scale=softmax_scale, **window,
        )
        if group > 1:
            # [t, kv_heads * group, d] -> [t, kv_heads, group, d]: sum the copies of each kv head.
            dk = dk.view(dk.shape[0], kv_heads, group, dk.shape[2]).sum(dim=2)
            dv = dv.view(dv.shape[0], kv_heads, group, dv.shape[2]).sum(dim=2)
        return dq, dk, dv
