"""GPT layer specs whose core attention is `FCPCoreAttention`."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from megatron.core.transformer.spec_utils import ModuleSpec

from mindspeed_mm.core.fcp.executor.attention import FCPCoreAttention


def with_fcp_core_attention(spec: ModuleSpec) -> ModuleSpec:
    """A copy of a transformer-layer spec with `FCPCoreAttention` as its self-attention's core attention."""
    attention = getattr(spec.submodules, "self_attention", None)
    attention_submodules = getattr(attention, "submodules", None)
    if attention_submodules is None or not hasattr(attention_submodules, "core_attention"):
        raise ValueError(
            f"FCP cannot place its core attention in layer spec {spec.module!r}: it has no "
            "self_attention.submodules.core_attention (multi-latent attention is not supported)"
        )
    submodules = dataclasses.replace(attention_submodules, core_attention=FCPCoreAttention)
    layer = dataclasses.replace(spec.submodules, self_attention=dataclasses.replace(attention, submodules=submodules))
    return dataclasses.replace(spec, submodules=layer)


def get_gpt_layer_local_spec_wrapper(get_spec: Callable[..., ModuleSpec]) -> Callable[..., ModuleSpec]:
    """megatron-core's local GPT layer spec, with FCP core attention."""

    @functools.wraps(get_spec)
    def wrapper(*args: Any, **kwargs: Any) -> ModuleSpec:
        return with_fcp_core_attention(get_spec(*args, **kwargs))

    return wrapper


def get_gpt_layer_with_transformer_engine_spec_wrapper(
    get_spec: Callable[..., ModuleSpec],
) -> Callable[..., ModuleSpec]:
    """megatron-core's Transformer Engine GPT layer spec, with FCP core attention."""

    @functools.wraps(get_spec)
    def wrapper(*args: Any, **kwargs: Any) -> ModuleSpec:
        return with_fcp_core_attention(get_spec(*args, **kwargs))

    return wrapper
