"""Document boundaries of a packed sequence (no megatron-core import, so planning tools can use it)."""
from __future__ import annotations

from typing import Sequence

import torch


def cumulative_lengths(lengths: Sequence[int]) -> torch.Tensor:
    """`[len(lengths) + 1]` int64 document boundaries (cu_seqlens) of documents of these lengths."""
    cu_seqlens = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    torch.cumsum(torch.tensor(lengths, dtype=torch.int64), dim=0, out=cu_seqlens[1:])
    return cu_seqlens
