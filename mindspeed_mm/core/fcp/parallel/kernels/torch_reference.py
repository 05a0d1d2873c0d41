"""Pure-PyTorch varlen attention with log-sum-exp: any device, used on CPU and by the tests."""
from __future__ import annotations

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import VarlenSegments


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype for softmax statistics and gradient sums: at least float32."""
    return torch.promote_types(dtype, torch.float32)


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, causal: bool) -> None:
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"heads ({q.shape[1]}) must be a multiple of kv_heads ({k.shape[1]})")
    if segments.cu_seqlens_q[-1] != q.shape[0] or segments.cu_seqlens_k[-1] != k.shape[0]:
        raise ValueError(
            f"segments cover {segments.cu_seqlens_q[-1]} query / {segments.cu_seqlens_k[-1]} key rows, "
            f"tensors have {q.shape[0]} / {k.shape[0]}"
        )
    if causal:
        for index, (qa, qb, ka, kb) in enumerate(
            zip(segments.cu_seqlens_q[:-1], segments.cu_seqlens_q[1:], segments.cu_seqlens_k[:-1], segments.cu_seqlens_k[1:])
        ):
            if qb - qa != kb - ka:
                raise ValueError(
                    f"causal attention needs equal query and key segment lengths: segment {index} has "
                    f"{qb - qa} query and {kb - ka} key rows"
                )


def _segment_scores(q: torch.Tensor, k: torch.Tensor, causal: bool, softmax_scale: float) -> torch.Tensor:
    """``[heads, lq, lk]`` scaled scores, ``-inf`` where the causal mask hides a key."""
    scores = torch.einsum("qhd,khd->hqk", q, k) * softmax_scale
    if causal:
        hidden = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool, device=q.device).triu(diagonal=1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return scores


class TorchReferenceKernel:
    """Loops over the segments and runs dense attention on each; exact, simple, not fast."""

    name = "torch"

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, *,
        causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_shapes(q, k, v, segments, causal)
        acc = accumulation_dtype(q.dtype)
        group = q.shape[1] // k.shape[1]
        out = q.new_zeros(q.shape[0], q.shape[1], v.shape[2])
        lse = torch.full((q.shape[0], q.shape[1]), float("-inf"), dtype=acc, device=q.device)
        for qa, qb, ka, kb in _non_empty_pairs(segments):
            k_seg = k[ka:kb].to(acc).repeat_interleave(group, dim=1)
            v_seg = v[ka:kb].to(acc).repeat_interleave(group, dim=1)
            scores = _segment_scores(q[qa:qb].to(acc), k_seg, causal, softmax_scale)
            seg_lse = torch.logsumexp(scores, dim=-1)
            probs = torch.exp(scores - seg_lse.unsqueeze(-1))
            out[qa:qb] = torch.einsum("hqk,khd->qhd", probs, v_seg).to(out.dtype)
            lse[qa:qb] = seg_lse.transpose(0, 1)
        return out, lse

    def backward(
        self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, segments: VarlenSegments, *, causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _check_shapes(q, k, v, segments, causal)
        acc = accumulation_dtype(q.dtype)
        kv_heads = k.shape[1]
        group = q.shape[1] // kv_heads
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        for qa, qb, ka, kb in _non_empty_pairs(segments):
            q_seg = q[qa:qb].to(acc)
            k_seg = k[ka:kb].to(acc).repeat_interleave(group, dim=1)
            v_seg = v[ka:kb].to(acc).repeat_interleave(group, dim=1)
            dout_seg = dout[qa:qb].to(acc)
            scores = _segment_scores(q_seg, k_seg, causal, softmax_scale)
            probs = torch.exp(scores - lse[qa:qb].to(acc).transpose(0, 1).unsqueeze(-1))
            # softmax backward: dS = P * (dP - rowsum(dO * O))
            delta = (dout_seg * out[qa:qb].to(acc)).sum(dim=-1).transpose(0, 1)
            dprobs = torch.einsum("qhd,khd->hqk", dout_seg, v_seg)
            dscores = probs * (dprobs - delta.unsqueeze(-1)) * softmax_scale
            dq[qa:qb] = torch.einsum("hqk,khd->qhd", dscores, k_seg)
            length = kb - ka
            # [lk, heads, d] -> [lk, kv_heads, group, d]: sum the query heads that share a kv head.
            dk[ka:kb] = torch.einsum("hqk,qhd->khd", dscores, q_seg).view(length, kv_heads, group, k.shape[2]).sum(dim=2)
            dv[ka:kb] = torch.einsum("hqk,qhd->khd", probs, dout_seg).view(length, kv_heads, group, k.shape[2]).sum(dim=2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _non_empty_pairs(segments: VarlenSegments) -> list[tuple[int, int, int, int]]:
    cu_q, cu_k = segments.cu_seqlens_q, segments.cu_seqlens_k
    return [
        (qa, qb, ka, kb)
        for qa, qb, ka, kb in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:])
        if qb > qa and kb > ka
    ]
