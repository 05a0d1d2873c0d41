"""3D mRoPE for the decoder of the VLM, in the slot of megatron-core's `RotaryEmbedding`.

Each token carries (temporal, height, width) position ids, computed for the whole sample and then
zigzag-sharded with the tokens; each rotary frequency rotates by one of the three (interleaved as in
Qwen3-VL, see `mrope_sections`). A text token has three equal ids, so it gets plain 1D RoPE.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.sandbox.shard_rotary import ShardRotaryEmbedding
from mindspeed_mm.core.fcp.sandbox.vision.mrope_sections import interleaved_mrope_axes


@dataclass
class MRopePackedSeqParams(FCPPackedSeqParams):
    """`FCPPackedSeqParams` plus the 3D position ids of this rank's tokens."""

    mrope_position_ids: torch.Tensor | None = None
    """`[shard_tokens, 3]` int64 (temporal, height, width) position of each of this rank's tokens."""


class ShardMRotaryEmbedding(ShardRotaryEmbedding):
    """Drop-in replacement for `GPTModel.rotary_pos_emb` that rotates by 3D position ids."""

    def __init__(self, kv_channels: int, rotary_base: int, sections: tuple[int, int, int]) -> None:
        if kv_channels != 2 * sum(sections):
            raise ValueError(f"mRoPE sections {sections} must sum to kv_channels / 2 = {kv_channels / 2}")
        super().__init__(kv_channels, rotary_base)
        axes = torch.tensor(interleaved_mrope_axes(sections), dtype=torch.int64)
        self.register_buffer("axes", axes, persistent=False)

    def shard_position_ids(self, packed_seq_params: FCPPackedSeqParams | None, tokens: int) -> torch.Tensor:
        """`[tokens, 3]` 3D position ids of the shard's tokens."""
        if not isinstance(packed_seq_params, MRopePackedSeqParams) or packed_seq_params.mrope_position_ids is None:
            raise ValueError("ShardMRotaryEmbedding needs MRopePackedSeqParams with mrope_position_ids")
        ids = packed_seq_params.mrope_position_ids
        if ids.dim() != 2 or ids.shape != (tokens, 3):
            raise ValueError(f"mrope_position_ids must be [{tokens}, 3] for the decoder input, got {list(ids.shape)}")
        return ids

    def forward(self, mrope_position_ids: torch.Tensor, packed_seq: bool = False) -> torch.Tensor:
        """`[tokens, 1, head_dim]` angles: frequency j rotates by the id of its axis."""
        ids = mrope_position_ids.to(self.inv_freq.device, torch.float32)
        positions = ids[:, self.axes]  # [tokens, head_dim / 2]
        freqs = positions * self.inv_freq
        return torch.cat((freqs, freqs), dim=-1).unsqueeze(1)
