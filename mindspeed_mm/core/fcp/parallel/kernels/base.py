"""Contract shared by the varlen attention kernels that the distributed algorithms call."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class VarlenSegments:
    """Pairs of query / key segments: query segment ``i`` attends only key segment ``i``."""

    cu_seqlens_q: tuple[int, ...]
    """Boundaries of the query segments inside the query rows, starting at 0."""
    cu_seqlens_k: tuple[int, ...]
    """Boundaries of the key/value segments inside the key rows, starting at 0 (same count)."""

    def __post_init__(self) -> None:
        if len(self.cu_seqlens_q) != len(self.cu_seqlens_k):
            raise ValueError(
                f"query and key segment counts differ: {len(self.cu_seqlens_q) - 1} "
                f"vs {len(self.cu_seqlens_k) - 1}"
            )

    @property
    def num_segments(self) -> int:
        """Number of (query, key) segment pairs."""
        return len(self.cu_seqlens_q) - 1

    @property
    def max_seqlen_q(self) -> int:
        """Longest query segment."""
        return max(b - a for a, b in zip(self.cu_seqlens_q[:-1], self.cu_seqlens_q[1:]))

    @property
    def max_seqlen_k(self) -> int:
        """Longest key segment."""
        return max(b - a for a, b in zip(self.cu_seqlens_k[:-1], self.cu_seqlens_k[1:]))

    def cu_tensors(self, device: torch.device, dtype: torch.dtype = torch.int32) -> tuple[torch.Tensor, torch.Tensor]:
        """Query and key boundaries as tensors, as device kernels take them."""
        return (
            torch.tensor(self.cu_seqlens_q, dtype=dtype, device=device),
            torch.tensor(self.cu_seqlens_k, dtype=dtype, device=device),
        )


class AttentionKernel(Protocol):
    """Varlen attention returning its log-sum-exp, so partial results over key blocks merge exactly.

    Shapes: q ``[tq, heads, head_dim]``, k and v ``[tk, kv_heads, head_dim]`` with ``heads`` a
    multiple of ``kv_heads`` (query head ``h`` uses key/value head ``h // (heads // kv_heads)``).
    ``causal=True`` requires every query segment to be as long as its key segment, and lets query
    row ``i`` of a segment see key rows ``0..i`` of that segment.
    A query row whose key segment is empty gets output 0 and log-sum-exp ``-inf``.
    """

    name: str

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: VarlenSegments, *,
        causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``out [tq, heads, head_dim]`` (dtype of q) and ``lse [tq, heads]`` (float32 or wider)."""
        ...

    def backward(
        self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, segments: VarlenSegments, *, causal: bool, softmax_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gradients of q, k, v given the final (merged) ``out`` and ``lse`` of the query rows."""
        ...
