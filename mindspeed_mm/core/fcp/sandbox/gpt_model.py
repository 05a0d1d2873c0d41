"""A Qwen3-shaped megatron-core GPT decoder wired for FCP (GQA, QK-norm, SwiGLU, RMSNorm, RoPE).

Requires megatron-core's model-parallel state to be initialised (TP = PP = 1 here), as every
megatron-core model does.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_config import TransformerConfig

from mindspeed_mm.core.fcp.sandbox.core_attention import FCPCoreAttention
from mindspeed_mm.core.fcp.sandbox.run_config import ModelConfig
from mindspeed_mm.core.fcp.sandbox.shard_rotary import ShardRotaryEmbedding


def transformer_config(model: ModelConfig, params_dtype: torch.dtype = torch.float32) -> TransformerConfig:
    """megatron-core config of a Qwen3-style decoder; CPU initialisation, no fused CUDA kernels."""
    return TransformerConfig(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        kv_channels=model.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=model.norm_epsilon,
        qk_layernorm=True,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=model.init_method_std,
        params_dtype=params_dtype,
        use_cpu_initialization=True,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        gradient_accumulation_fusion=False,
    )


def get_fcp_gpt_layer_spec(core_attention: type = FCPCoreAttention) -> ModuleSpec:
    """megatron-core's local GPT layer spec (RMSNorm, QK-norm) with `core_attention` as core attention."""
    spec = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")
    attention = spec.submodules.self_attention
    attention_submodules = dataclasses.replace(attention.submodules, core_attention=core_attention)
    layer_submodules = dataclasses.replace(
        spec.submodules, self_attention=dataclasses.replace(attention, submodules=attention_submodules)
    )
    return dataclasses.replace(spec, submodules=layer_submodules)


def build_gpt_model(
    model: ModelConfig,
    seed: int,
    params_dtype: torch.dtype = torch.float32,
    core_attention: type = FCPCoreAttention,
) -> GPTModel:
    """The decoder with shard-aware RoPE and `core_attention`; the same seed gives the same weights."""
    config = transformer_config(model, params_dtype)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gpt = GPTModel(
            config=config,
            transformer_layer_spec=get_fcp_gpt_layer_spec(core_attention),
            vocab_size=model.vocab_size,
            max_sequence_length=model.seq_length,
            position_embedding_type="rope",
            rotary_base=model.rotary_base,
            share_embeddings_and_output_weights=False,
        )
    gpt.rotary_pos_emb = ShardRotaryEmbedding(model.head_dim, model.rotary_base)
    return gpt
