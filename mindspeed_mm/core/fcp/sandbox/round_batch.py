"""One rank's input for one round: its zigzag shard of the group's packed batch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mindspeed_mm.core.fcp.parallel import AttentionGroup
from mindspeed_mm.core.fcp.sandbox.text_dataset import Sample
from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.sandbox.packed_shard import (
    CU_SEQLENS_KEY,
    LOSS_MASK_KEY,
    PACKED_SEQ_PARAMS_KEY,
    shard_packed_batch,
)
from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths

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
        return ShardBatch(
            tokens=self.tokens.to(device),
            labels=self.labels.to(device),
            loss_mask=self.loss_mask.to(device),
            position_ids=self.position_ids.to(device),
            sample_ids=self.sample_ids,
            packed_seq_params=self.packed_seq_params.to(device),
        )


def build_shard_batch(
    samples: Sequence[Sample],
    *,
    rank_in_group: int,
    degree: int,
    group: AttentionGroup,
    algo: str,
    kernel: str = "auto",
) -> ShardBatch:
    """Packs `samples` in order (one document each) and keeps group rank `rank_in_group`'s zigzag shard,
    with the shard function of every driver (`shard_packed_batch`, including its loss-free padding
    document when the samples alone would leave a rank without tokens)."""
    if not samples:
        raise ValueError("a group must hold at least one sample")
    packed = {
        CU_SEQLENS_KEY: cumulative_lengths([s.length for s in samples]),
        "tokens": torch.cat([s.tokens for s in samples]).unsqueeze(0),
        "labels": torch.cat([s.labels for s in samples]).unsqueeze(0),
        LOSS_MASK_KEY: torch.cat([s.loss_mask for s in samples]).unsqueeze(0),
        "sample_ids": torch.repeat_interleave(
            torch.tensor([s.index for s in samples], dtype=torch.int64),
            torch.tensor([s.length for s in samples], dtype=torch.int64),
        ).unsqueeze(0),
    }
    shard = shard_packed_batch(packed, rank_in_group=rank_in_group, degree=degree, group=group, algo=algo,
                               kernel=kernel, fill={"sample_ids": PADDING_SAMPLE_ID})
    return ShardBatch(
        tokens=shard["tokens"],
        labels=shard["labels"],
        loss_mask=shard[LOSS_MASK_KEY].reshape(-1),
        position_ids=shard["position_ids"],
        sample_ids=shard["sample_ids"].reshape(-1),
        packed_seq_params=shard[PACKED_SEQ_PARAMS_KEY],
    )
