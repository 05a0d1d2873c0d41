"""MindSpeed-MM's Qwen3-VL under FCP: each rank runs its zigzag shard of its group's packed samples.

Upstream's model sees context parallelism of 1 (FCP's groups are not Megatron's). Inside an FCP round two
wrappers take over:

- `Qwen3VLModel.forward` builds this rank's shard of the group's packed sequence through the adapter
  (`model_adapter.shard_inputs`: embeddings with the shard's vision features in place, visual-position mask and
  deepstack features, the shard's mRoPE ids), then runs the text decoder, final norm and LM head on the shard;
- `Qwen3VLTextAttention.forward` attends over the whole group with FCP's ring or Ulysses attention, never
  across a sample boundary.

The MoE model (`Qwen3VLMoeModel`) inherits both functions, so the same wrappers run it.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from mindspeed_mm.core.fcp.parallel import fcp_attention
from mindspeed_mm.core.fcp.runtime.round_shard import SEQLENS_KEY, active_shard, round_shard, run_decoder_on

from ..model_adapter import shard_inputs
from ..runtime import FCPRuntimeError, get_fcp_runtime


def model_forward_wrapper(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`Qwen3VLModel.forward`, inside an FCP round on this rank's shard of the group's packed samples."""
    signature = inspect.signature(forward)

    @functools.wraps(forward)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        extra = dict(bound.arguments.pop("kwargs", {}))
        runtime = get_fcp_runtime()
        shard = round_shard(runtime, extra.get(SEQLENS_KEY))
        if shard is None:
            return forward(self, *args, **kwargs)
        given = bound.arguments
        input_ids = given.get("input_ids")
        if input_ids is None or input_ids.shape[0] != 1 or given.get("inputs_embeds") is not None:
            raise FCPRuntimeError("FCP runs Qwen3-VL on the input ids of one packed sequence per round")
        if given.get("past_key_values") is not None:
            raise FCPRuntimeError("FCP trains without a key-value cache")
        from megatron.training import get_args

        from ..model_adapter import run_adapter

        seqlens = extra.pop(SEQLENS_KEY)
        inputs = shard_inputs(run_adapter(get_args()), self, runtime, shard, input_ids, given, seqlens)
        # The decoder's own varlen bookkeeping covers the shard as one sequence; FCP's attention uses the
        # samples' boundaries over the whole group instead.
        tokens = shard.global_index.numel()
        inputs[SEQLENS_KEY] = torch.tensor([tokens], dtype=torch.int32)
        inputs["indices"] = torch.arange(tokens, device=inputs["inputs_embeds"].device)
        extra.pop("indices", None)
        run_decoder_on(shard)
        outputs = self.language_model(input_ids=None, attention_mask=None, past_key_values=None,
                                      cache_position=None, **inputs, **extra)
        from mindspeed_mm.models.transformers.qwen3vl.output import Qwen3VLModelOutputWithPast

        return Qwen3VLModelOutputWithPast(last_hidden_state=outputs.last_hidden_state, past_key_values=None)

    return run


def text_attention_forward_wrapper(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`Qwen3VLTextAttention.forward` attending over the round's group with FCP's ring, Ulysses or hybrid attention."""
    signature = inspect.signature(forward)

    @functools.wraps(forward)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        runtime = get_fcp_runtime()
        shard = active_shard(runtime)
        if shard is None:
            return forward(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        hidden_states = bound.arguments["hidden_states"]
        cos, sin = bound.arguments["position_embeddings"]
        if self.training and self.attention_dropout > 0:
            raise FCPRuntimeError("FCP's attention has no dropout: set the text model's attention_dropout to 0")
        from mindspeed_mm.models.transformers.qwen3vl.modules import apply_rotary_pos_emb

        batch, tokens = hidden_states.shape[:-1]
        heads_shape = (batch, tokens, -1, self.head_dim)
        query = self.q_norm(self.q_proj(hidden_states).view(heads_shape))
        key = self.k_norm(self.k_proj(hidden_states).view(heads_shape))
        value = self.v_proj(hidden_states).view(heads_shape)
        query, key = apply_rotary_pos_emb(query, key, cos, sin, unsqueeze_dim=2)
        output = fcp_attention(
            query[0], key[0], value[0], shard.cu_seqlens,
            group=shard.attention_group, algo=shard.fcp_round.algo, causal=True, softmax_scale=self.scaling,
            kernel=runtime.settings.attention_kernel,
        )
        return self.o_proj(output.reshape(batch, tokens, -1))

    return run
