"""One rank's input for one VLM round: its zigzag shard and its group's media (which member encodes what, and where
the rows go, is the product's split and exchange)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch

from mindspeed_mm.core.fcp.parallel import AttentionGroup, zigzag_shard
from mindspeed_mm.core.fcp.sandbox.round_batch import build_shard_batch
from mindspeed_mm.core.fcp.sandbox.vision.group_media import GroupMedia, group_media
from mindspeed_mm.core.fcp.sandbox.vision.shard_mrope import MRopePackedSeqParams
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VideoSample


@dataclass(frozen=True)
class VLMShardBatch:
    """Model inputs of one rank in one round (tensors hold this rank's shard tokens only)."""

    tokens: torch.Tensor
    """`[1, t]` int64 input ids (vision tokens hold a placeholder id)."""
    labels: torch.Tensor
    """`[1, t]` int64 next-token targets."""
    loss_mask: torch.Tensor
    """`[t]` float32, 1 where the token's loss counts."""
    sample_ids: torch.Tensor
    """`[t]` int64 dataset index of the sample each token belongs to."""
    packed_seq_params: MRopePackedSeqParams
    """Group, algorithm, packed layout and the shard's 3D position ids."""
    media: GroupMedia
    """The group's videos."""
    rank_in_group: int
    """This rank's index in the group."""

    @property
    def needed_rows(self) -> list[torch.Tensor]:
        """Per member, the group's feature rows its shard needs (what the exchange delivers it)."""
        return [self.media.needed_rows(member) for member in range(self.media.zigzag.degree)]

    @property
    def vision_positions(self) -> torch.Tensor:
        """Shard-local rows of this rank's vision tokens, in the order of its received feature rows."""
        return self.media.vision_positions(self.rank_in_group)


def build_vlm_shard_batch(
    samples: Sequence[VideoSample],
    *,
    rank_in_group: int,
    degree: int,
    group: AttentionGroup,
    algo: str,
    kernel: str = "auto",
) -> VLMShardBatch:
    """Packs `samples` in order, keeps group rank `rank_in_group`'s zigzag shard and plans the vision work.

    Text fields come from `build_shard_batch` (including its loss-free padding document when the group
    holds fewer tokens than ranks); the 3D position ids are built for the whole packed batch and
    sharded the same way.
    """
    text = build_shard_batch(samples, rank_in_group=rank_in_group, degree=degree, group=group, algo=algo,
                             kernel=kernel)
    cu_seqlens = text.packed_seq_params.cu_seqlens
    padding = int(cu_seqlens[-1]) - sum(s.length for s in samples)
    mrope = [s.mrope_position_ids for s in samples]
    if padding:
        mrope.append(torch.arange(padding, dtype=torch.int64).unsqueeze(1).expand(-1, 3))

    # Packs exactly as build_shard_batch does (same padding rule), so the feature rows index the same batch.
    media = group_media([s.layout for s in samples], [s.index for s in samples], degree)
    params = text.packed_seq_params
    return VLMShardBatch(
        tokens=text.tokens,
        labels=text.labels,
        loss_mask=text.loss_mask,
        sample_ids=text.sample_ids,
        packed_seq_params=MRopePackedSeqParams(
            **{f.name: getattr(params, f.name) for f in dataclasses.fields(params) if f.init},
            mrope_position_ids=zigzag_shard(torch.cat(mrope), cu_seqlens, rank_in_group, degree),
        ),
        media=media,
        rank_in_group=rank_in_group,
    )
