"""Core attention of megatron-core layers that runs over the round's FCP group.

`FCPCoreAttention` has the constructor and forward signature of megatron-core 0.12's
`DotProductAttention`, so a layer spec can name it as `core_attention`. The group, the algorithm
and the group's document layout come with each call in `FCPPackedSeqParams`; nothing is read from
a global, so consecutive rounds may use different groups.
"""
from __future__ import annotations

import math

import torch
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig

from mindspeed_mm.core.fcp.sandbox.packed_seq import FCPPackedSeqParams
from mindspeed_mm.core.fcp.parallel import fcp_attention


class FCPCoreAttention(MegatronModule):
    """Causal varlen attention over this rank's zigzag shard of the group's packed batch."""

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
        if attn_mask_type != AttnMaskType.causal:
            raise ValueError(f"FCPCoreAttention supports causal self-attention only, got {attn_mask_type}")
        dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        if dropout:
            raise ValueError(f"FCPCoreAttention does not support attention dropout, got {dropout}")
        if config.apply_query_key_layer_scaling:
            raise ValueError("FCPCoreAttention does not support apply_query_key_layer_scaling")
        self.layer_number = max(1, layer_number)
        self.attention_type = attention_type
        self.head_dim = config.kv_channels
        self.softmax_scale = 1.0 / math.sqrt(self.head_dim) if softmax_scale is None else softmax_scale

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: FCPPackedSeqParams | None = None,
    ) -> torch.Tensor:
        """`query [t, heads, d]`, `key/value [t, kv_heads, d]` -> `[t, 1, heads * d]`."""
        if not isinstance(packed_seq_params, FCPPackedSeqParams):
            raise ValueError(
                "FCPCoreAttention needs FCPPackedSeqParams (group, algo, cu_seqlens) in packed_seq_params, "
                f"got {type(packed_seq_params).__name__}"
            )
        if attention_bias is not None:
            raise ValueError("FCPCoreAttention does not support attention_bias")
        if attention_mask is not None:
            raise ValueError("FCPCoreAttention builds its causal varlen mask from cu_seqlens; pass attention_mask=None")
        params = packed_seq_params
        out = fcp_attention(
            query,
            key,
            value,
            params.cu_seqlens,
            group=params.group,
            algo=params.algo,
            causal=True,
            kernel=params.kernel,
            softmax_scale=self.softmax_scale,
        )
        # [t, heads, d] -> [t, b=1, heads * d], the layout megatron's linear_proj expects.
        return out.reshape(out.shape[0], 1, -1)
