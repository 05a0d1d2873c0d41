"""One rank's input for one VLM round: its zigzag shard, its frame groups and its vision-token exchange."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mindspeed_mm.core.fcp.parallel import AttentionGroup
from mindspeed_mm.core.fcp.sandbox.round_batch import build_shard_batch
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VideoSample
from mindspeed_mm.core.fcp.sandbox.vision.exchange import VisionRouting, vision_routing
from mindspeed_mm.core.fcp.sandbox.vision.frames import FrameUnit, split_group_vision
from mindspeed_mm.core.fcp.sandbox.vision.shard_mrope import MRopePackedSeqParams
from mindspeed_mm.core.fcp.parallel import zigzag_shard


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
    units: tuple[FrameUnit, ...]
    """Every frame group of the group's packed batch."""
    owners: tuple[int, ...]
    """Group rank that encodes each of `units`."""
    routing: VisionRouting
    """Where this rank's encoded tokens go and where the received ones land."""
    rank_in_group: int
    """This rank's index in the group."""

    @property
    def encoded_units(self) -> tuple[FrameUnit, ...]:
        """The frame groups this rank encodes, in packed order (the order of its encoder output)."""
        return tuple(u for u, owner in zip(self.units, self.owners) if owner == self.rank_in_group)


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

    # Packs exactly as build_shard_batch does (same padding rule), so units index the same packed batch.
    work = split_group_vision([s.layout for s in samples], [s.index for s in samples], degree)
    params = text.packed_seq_params
    return VLMShardBatch(
        tokens=text.tokens,
        labels=text.labels,
        loss_mask=text.loss_mask,
        sample_ids=text.sample_ids,
        packed_seq_params=MRopePackedSeqParams(
            cu_seqlens=params.cu_seqlens,
            position_ids=params.position_ids,
            group=params.group,
            degree=params.degree,
            algo=params.algo,
            kernel=params.kernel,
            mrope_position_ids=zigzag_shard(torch.cat(mrope), cu_seqlens, rank_in_group, degree),
        ),
        units=work.units,
        owners=work.owners,
        routing=vision_routing(work.units, work.owners, work.zigzag, work.holders, rank_in_group),
        rank_in_group=rank_in_group,
    )
