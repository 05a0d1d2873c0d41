"""Rotary embedding for zigzag shards, in the slot of megatron-core's `RotaryEmbedding`.

megatron-core 0.12's `RotaryEmbedding` moves its frequencies to `torch.cuda.current_device()` and
assumes each rank holds consecutive positions. `ShardRotaryEmbedding` computes the angles of the
exact position ids of this rank's tokens (each token's position inside its own document), on the
device of those ids.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams


class ShardRotaryEmbedding(nn.Module):
    """Drop-in replacement for `GPTModel.rotary_pos_emb` (non-interleaved RoPE, full rotary dim)."""

    def __init__(self, kv_channels: int, rotary_base: int) -> None:
        super().__init__()
        if kv_channels % 2:
            raise ValueError(f"RoPE needs an even head dimension, got kv_channels={kv_channels}")
        exponents = torch.arange(0, kv_channels, 2, dtype=torch.float32) / kv_channels
        self.register_buffer("inv_freq", 1.0 / (rotary_base**exponents), persistent=False)

    def get_rotary_seq_len(
        self,
        inference_context: Any,
        transformer: Any,
        transformer_input: torch.Tensor,
        transformer_config: Any,
        packed_seq_params: FCPPackedSeqParams | None,
        **_: Any,
    ) -> torch.Tensor:
        """The shard's position ids; `GPTModel.forward` hands this result straight to `forward`."""
        return self.shard_position_ids(packed_seq_params, transformer_input.shape[0])

    def shard_position_ids(self, packed_seq_params: FCPPackedSeqParams | None, tokens: int) -> torch.Tensor:
        """`[tokens]` position ids of the shard's tokens, checked against the decoder input's `tokens`."""
        if not isinstance(packed_seq_params, FCPPackedSeqParams) or packed_seq_params.position_ids is None:
            raise ValueError("ShardRotaryEmbedding needs FCPPackedSeqParams with position_ids")
        if packed_seq_params.position_ids.numel() != tokens:
            raise ValueError(
                f"position_ids hold {packed_seq_params.position_ids.numel()} tokens but the decoder input "
                f"has {tokens}"
            )
        return packed_seq_params.position_ids

    def forward(self, position_ids: torch.Tensor, packed_seq: bool = False) -> torch.Tensor:
        """`[tokens, 1, head_dim]` angles, broadcasting over the heads of `[tokens, heads, head_dim]`."""
        freqs = torch.outer(position_ids.to(self.inv_freq.device, torch.float32), self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1).unsqueeze(1)
