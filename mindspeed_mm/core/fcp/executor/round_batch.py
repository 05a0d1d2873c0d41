"""One rank's input for one round: its zigzag shard of the group's packed batch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.executor.dataset import Sample
from mindspeed_mm.core.fcp.executor.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.executor.padding import cumulative_lengths, packed_lengths
from mindspeed_mm.core.fcp.parallel import zigzag_positions, zigzag_shard

PADDING_SAMPLE_ID = -1
"""`ShardBatch.sample_ids` value of padding tokens."""


@dataclass(frozen=True)
class ShardBatch:
    """Model inputs of one rank in one round (all tensors hold this rank's shard tokens only)."""

    tokens: torch.Tensor
    """`[1, t]` int64 input ids."""
    labels: torch.Tensor
    """`[1, t]` int64 next-token targets."""
    loss_mask: torch.Tensor
    """`[t]` float32, 1 where the token's loss counts."""
    position_ids: torch.Tensor
    """`[1, t]` int64 position of each token inside its own document."""
    sample_ids: torch.Tensor
    """`[t]` int64 dataset index of the sample each token belongs to (for token accounting)."""
    packed_seq_params: FCPPackedSeqParams
    """Group, algorithm and packed layout handed to the attention layers."""

    def to(self, device: torch.device) -> "ShardBatch":
        """The same batch with the model inputs on `device` (sample ids stay on the CPU)."""
        params = self.packed_seq_params
        return ShardBatch(
            tokens=self.tokens.to(device),
            labels=self.labels.to(device),
            loss_mask=self.loss_mask.to(device),
            position_ids=self.position_ids.to(device),
            sample_ids=self.sample_ids,
            packed_seq_params=FCPPackedSeqParams(
                cu_seqlens=params.cu_seqlens.to(device),
                position_ids=params.position_ids.to(device),
                group=params.group,
                degree=params.degree,
                algo=params.algo,
            ),
        )


def build_shard_batch(
    samples: Sequence[Sample],
    *,
    rank_in_group: int,
    degree: int,
    group: dist.ProcessGroup | None,
    algo: str,
) -> ShardBatch:
    """Packs `samples` in order (one document each) and keeps group rank `rank_in_group`'s zigzag shard.

    A group holding fewer tokens than ranks would leave some rank an empty shard, which
    megatron-core's attention cannot reshape; the batch then gets one extra padding document of
    `2 * degree` tokens (two per rank, no loss, attending only to itself), decided identically on
    every rank of the group, so the real tokens' outputs and gradients are unchanged.
    """
    if not samples:
        raise ValueError("a group must hold at least one sample")
    if not 0 <= rank_in_group < degree:
        raise ValueError(f"rank_in_group {rank_in_group} is outside a group of degree {degree}")
    samples = list(samples)
    lengths = packed_lengths([s.length for s in samples], degree)
    if len(lengths) > len(samples):
        samples.append(_padding_document(lengths[-1]))
    cu_seqlens = cumulative_lengths(lengths)
    sample_ids = torch.repeat_interleave(
        torch.tensor([s.index for s in samples], dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64)
    )

    def shard(x: torch.Tensor) -> torch.Tensor:
        return zigzag_shard(x, cu_seqlens, rank_in_group, degree)

    positions = zigzag_positions(cu_seqlens, rank_in_group, degree)
    return ShardBatch(
        tokens=shard(torch.cat([s.tokens for s in samples])).unsqueeze(0),
        labels=shard(torch.cat([s.labels for s in samples])).unsqueeze(0),
        loss_mask=shard(torch.cat([s.loss_mask for s in samples])),
        position_ids=positions.unsqueeze(0),
        sample_ids=shard(sample_ids),
        packed_seq_params=FCPPackedSeqParams(
            cu_seqlens=cu_seqlens, position_ids=positions, group=group, degree=degree, algo=algo
        ),
    )


def _padding_document(length: int) -> Sample:
    zeros = torch.zeros(length, dtype=torch.int64)
    return Sample(index=PADDING_SAMPLE_ID, tokens=zeros, labels=zeros, loss_mask=torch.zeros(length))
