"""Core attention of megatron-core layers that runs over the round's FCP group.

`FCPCoreAttention` has the constructor and forward signature of megatron-core 0.12's
`DotProductAttention` (`CoreAttentionSlot`, which the demo trainer's other attentions share), so a layer spec can
name it as `core_attention`. The group, the algorithm
and the group's document layout come with each call in `FCPPackedSeqParams`; nothing is read from
a global, so consecutive rounds may use different groups.
"""
from __future__ import annotations

import math

import torch
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig

from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.parallel import fcp_attention


class CoreAttentionSlot(MegatronModule):
    """What megatron-core 0.12 calls in a layer spec's `core_attention` slot: `DotProductAttention`'s constructor
    and forward. The documents come in `packed_seq_params`, never as a mask or bias; subclasses say how to attend
    (`attend`)."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
    ) -> None:
        super().__init__(config=config)
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.attention_type = attention_type
        self.attention_dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        self.softmax_scale = softmax_scale

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: PackedSeqParams | None = None,
    ) -> torch.Tensor:
        """`query [t, heads, d]`, `key/value [t, kv_heads, d]` -> `[t, 1, heads * d]`, the layout megatron's
        linear_proj expects."""
        if attention_mask is not None or attention_bias is not None:
            raise ValueError(f"{type(self).__name__} takes its documents from packed_seq_params: pass no "
                             "attention_mask or attention_bias")
        out = self.attend(query, key, value, packed_seq_params)  # [t, heads, d]
        return out.reshape(out.shape[0], 1, -1)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               packed_seq_params: PackedSeqParams | None) -> torch.Tensor:
        """`[t, heads, d]` attention output."""
        raise NotImplementedError


class FCPCoreAttention(CoreAttentionSlot):
    """Causal varlen attention over this rank's zigzag shard of the group's packed batch."""

    def __init__(self, config: TransformerConfig, layer_number: int, attn_mask_type: AttnMaskType,
                 attention_type: str, attention_dropout: float | None = None, softmax_scale: float | None = None,
                 cp_comm_type: str | None = None) -> None:
        super().__init__(config, layer_number, attn_mask_type, attention_type, attention_dropout, softmax_scale)
        if attn_mask_type != AttnMaskType.causal:
            raise ValueError(f"FCPCoreAttention supports causal self-attention only, got {attn_mask_type}")
        if self.attention_dropout:
            raise ValueError(f"FCPCoreAttention does not support attention dropout, got {self.attention_dropout}")
        if config.apply_query_key_layer_scaling:
            raise ValueError("FCPCoreAttention does not support apply_query_key_layer_scaling")
        self.head_dim = config.kv_channels
        if softmax_scale is None:
            self.softmax_scale = 1.0 / math.sqrt(self.head_dim)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               packed_seq_params: FCPPackedSeqParams | None) -> torch.Tensor:
        if not isinstance(packed_seq_params, FCPPackedSeqParams):
            raise ValueError(
                "FCPCoreAttention needs FCPPackedSeqParams (group, algo, cu_seqlens) in packed_seq_params, "
                f"got {type(packed_seq_params).__name__}"
            )
        params = packed_seq_params
        return fcp_attention(query, key, value, params.cu_seqlens, group=params.group, algo=params.algo,
                             causal=True, kernel=params.kernel, softmax_scale=self.softmax_scale)
