"""This rank's zigzag shard of the running round's packed samples, as the patched model layers see it.

The round's batch carries the packed documents' lengths under `SEQLENS_KEY` (the samples', then the padding
document `solver.short_shards` asks for). The model's forward builds the shard once (`round_shard`) and hands it to
its attention layers (`run_decoder_on`), which find it again in the round's backward pass too, where activation
recomputation runs them once more (`active_shard`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel import AttentionGroup, ZigzagLayout, zigzag_layout
from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRound, FCPRuntime, FCPRuntimeError

SEQLENS_KEY = "seqlens"
"""Batch key of the packed documents' token lengths (int32), which MindSpeed-MM's models read."""


@dataclass(frozen=True)
class RoundShard:
    """The round's packed sequence as the decoder of this rank sees it."""

    fcp_round: FCPRound
    cu_seqlens: tuple[int, ...]
    """Document boundaries of the group's packed sequence (the whole sequence, not the shard)."""
    layout: ZigzagLayout
    """Every member's zigzag shard of the packed sequence."""
    global_index: torch.Tensor
    """Index in the packed sequence of each token of this rank's shard, in shard order."""
    group: dist.ProcessGroup | None
    """The round's CP group (the vision encoder's split exchanges over it); None for a group of one rank."""
    attention_group: AttentionGroup
    """What the text attention runs over: the CP group, or a hybrid group's Ulysses block and ring."""

    def member_index(self, member: int) -> torch.Tensor:
        """Like `global_index`, for group member `member`."""
        return self.layout.shard(member).global_index


_DECODER_SHARD: RoundShard | None = None
"""The shard of the running round's decoder; it stays set through the round's backward pass."""


def round_shard(runtime: FCPRuntime, seqlens: torch.Tensor | None) -> RoundShard | None:
    """This rank's shard of the running round's packed documents (None outside an FCP round)."""
    fcp_round = runtime.active_round
    if fcp_round is None:
        return None
    if seqlens is None:
        raise FCPRuntimeError(
            f"an FCP round needs the packed samples' lengths under batch[{SEQLENS_KEY!r}]: "
            "set data.dataloader_param.sampler_type: FCPBatchSampler")
    cu_seqlens = tuple(int(x) for x in cumulative_lengths(torch.as_tensor(seqlens).reshape(-1).tolist()))
    layout = zigzag_layout(cu_seqlens, fcp_round.degree)
    shard = layout.shard(fcp_round.rank_in_group)
    if shard.length == 0:  # the data loader pads such groups (`solver.short_shards`)
        raise FCPRuntimeError(
            f"round {fcp_round.round_index + 1}: {cu_seqlens[-1]} tokens leave rank {fcp_round.rank_in_group} of a "
            f"group of degree {fcp_round.degree} without tokens, and the batch carries no padding document")
    return RoundShard(fcp_round, cu_seqlens, layout, shard.global_index, runtime.process_group(fcp_round),
                      runtime.attention_group(fcp_round))


def run_decoder_on(shard: RoundShard) -> None:
    """Makes the attention layers run on `shard` until the round ends (its backward pass included)."""
    global _DECODER_SHARD
    _DECODER_SHARD = shard


def active_shard(runtime: FCPRuntime) -> RoundShard | None:
    """The shard the decoder runs on in this round, forward and backward (None outside FCP rounds)."""
    shard = _DECODER_SHARD
    if shard is None or runtime.active_round is not shard.fcp_round:
        return None
    return shard


__all__ = ["RoundShard", "SEQLENS_KEY", "active_shard", "round_shard", "run_decoder_on"]
