"""This rank's zigzag shard of the running round's packed samples, as the patched model layers see it."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths
from mindspeed_mm.core.fcp.parallel import AttentionGroup, ZigzagLayout, zigzag_layout

from ..runtime import FCPRound, FCPRuntimeError, get_fcp_runtime

SEQLENS_KEY = "seqlens"
"""Batch key of the packed samples' token lengths (int32), which MindSpeed-MM's Qwen3-VL reads."""


@dataclass(frozen=True)
class TextShard:
    """The round's packed sequence as the text decoder of this rank sees it."""

    fcp_round: FCPRound
    cu_seqlens: tuple[int, ...]
    """Sample boundaries of the group's packed sequence (the whole sequence, not the shard)."""
    layout: ZigzagLayout
    """Every member's zigzag shard of the packed sequence."""
    global_index: torch.Tensor
    """Index in the packed sequence of each token of this rank's shard, in shard order."""
    group: dist.ProcessGroup | None
    """The round's CP group (the vision encoder's split exchanges over it); None for a group of one rank."""
    attention_group: AttentionGroup
    """What the text attention runs over: the CP group, or a hybrid group's Ulysses block and ring."""


_ROUND_SHARD: TextShard | None = None
"""The shard of the running round's text decoder; it stays set through the round's backward pass, where
activation recomputation runs the decoder layers again."""


def round_shard(seqlens: torch.Tensor | None) -> TextShard | None:
    """This rank's shard of the running round's packed samples (None outside an FCP round)."""
    runtime = get_fcp_runtime()
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
    if shard.length == 0:
        raise FCPRuntimeError(
            f"round {fcp_round.round_index + 1}: {cu_seqlens[-1]} tokens leave rank {fcp_round.rank_in_group} of a "
            f"group of degree {fcp_round.degree} without tokens")
    return TextShard(fcp_round, cu_seqlens, layout, shard.global_index, runtime.process_group(fcp_round),
                     runtime.attention_group(fcp_round))


def active_shard() -> TextShard | None:
    """The shard the text decoder runs on in this round, forward and backward (None outside FCP rounds)."""
    shard = _ROUND_SHARD
    if shard is None or get_fcp_runtime().active_round is not shard.fcp_round:
        return None
    return shard


def run_text_decoder_on(shard: TextShard) -> None:
    """Makes the attention layers run on `shard` until the round ends (its backward pass included)."""
    global _ROUND_SHARD
    _ROUND_SHARD = shard
