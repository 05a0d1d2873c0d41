"""Synthetic packed batches for timing: token ids, next-token labels and zigzag shards."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from mindspeed_mm.core.fcp.parallel import zigzag_layout
from mindspeed_mm.core.fcp.profiler.decoder import ShardInputs


def cu_seqlens_of(lengths: Sequence[int]) -> tuple[int, ...]:
    """Document boundaries of a packed batch of these lengths; every length must be a positive int."""
    bounds = [0]
    for index, length in enumerate(lengths):
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
            raise ValueError(f"document {index}: length must be a positive int, got {length!r}")
        bounds.append(bounds[-1] + length)
    if len(bounds) < 2:
        raise ValueError("a packed batch needs at least one document")
    return tuple(bounds)


def shard_inputs(lengths: Sequence[int], vocab: int, rank: int, degree: int, *, seed: int = 0,
                 device: torch.device | str = "cpu") -> ShardInputs:
    """Rank ``rank``'s zigzag shard (of ``degree``) of a seeded random packed batch with these document lengths."""
    cu = cu_seqlens_of(lengths)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (cu[-1],), generator=generator)
    # Next token inside the document; a document's last token predicts its own id (no crossing).
    labels = torch.roll(tokens, -1)
    ends = torch.tensor(cu[1:], dtype=torch.int64) - 1
    labels[ends] = tokens[ends]
    shard = zigzag_layout(cu, degree).shard(rank)
    index = shard.global_index
    return ShardInputs(tokens=tokens[index].to(device), labels=labels[index].to(device),
                       positions=shard.positions.to(device))
