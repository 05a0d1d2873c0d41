"""When a group's packed batch gets a loss-free padding document (no megatron-core import, so planning
tools can use it)."""
from __future__ import annotations

from typing import Sequence

import torch

from mindspeed_mm.core.fcp.parallel import zigzag_layout


def cumulative_lengths(lengths: Sequence[int]) -> torch.Tensor:
    """`[len(lengths) + 1]` int64 document boundaries (cu_seqlens) of documents of these lengths."""
    cu_seqlens = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    torch.cumsum(torch.tensor(lengths, dtype=torch.int64), dim=0, out=cu_seqlens[1:])
    return cu_seqlens


def packed_lengths(lengths: Sequence[int], degree: int) -> list[int]:
    """Document lengths of a group's packed batch: the samples', plus a padding document of `2 * degree`
    tokens when the samples alone would leave some rank's zigzag shard empty (megatron-core cannot
    reshape an empty shard)."""
    lengths = list(lengths)
    if min(shard.length for shard in zigzag_layout(cumulative_lengths(lengths), degree).shards) == 0:
        lengths.append(2 * degree)
    return lengths
