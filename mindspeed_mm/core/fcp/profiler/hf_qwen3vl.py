"""Hugging Face's Qwen3-VL (the model MindSpeed-MM's Qwen3-VL forks) built from a model shape, for `fcp profile
--layers hf`: its text model and vision model of 1 and 2 layers / blocks, timed forward + backward, so that the
table prices the layers the product trains (their host-side work included) rather than the profiler's lean
decoder. Needs the `transformers` package (`pip install mindspeed-mm-fcp[hf]`).

- Text: `Qwen3VLTextModel` fed `inputs_embeds` of one document of x tokens (causal, sdpa); one layer's time is
  the 2-layer model's minus the 1-layer model's.
- Vision: `Qwen3VLVisionModel` fed one video of G frame groups of the encoder's attention window (a grid of
  G x h x w patches, h x w = the window); a call of `depth` blocks costs the 1-block model plus depth - 1 times
  the difference of the 2-block and 1-block models (patch embedding, position embedding and merger counted once).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from mindspeed_mm.core.fcp.cost.shapes import EncoderShape
from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.profiler.compute import Repeats
from mindspeed_mm.core.fcp.profiler.decoder import TORCH_DTYPES

TEXT_ROPE_SECTIONS = (24, 20, 20)
"""Qwen3-VL's mRoPE sections (T, H, W) of a 128-wide head; other widths keep the proportions."""


def require_transformers() -> None:
    """Raise ValueError naming the option when Hugging Face's Qwen3-VL cannot be imported."""
    try:
        from transformers.models.qwen3_vl import modeling_qwen3_vl  # noqa: F401
    except ImportError as exc:
        raise ValueError(f"--layers hf needs the transformers package with Qwen3-VL (pip install "
                         f"'mindspeed-mm-fcp[hf]'): {exc}") from exc


def rope_sections(head_dim: int) -> list[int]:
    """mRoPE sections summing to head_dim / 2 in Qwen3-VL's proportions."""
    half = head_dim // 2
    spatial = half * TEXT_ROPE_SECTIONS[1] // sum(TEXT_ROPE_SECTIONS)
    return [half - 2 * spatial, spatial, spatial]


def text_model(shape: ModelShape, layers: int, dtype: str, device: torch.device, seed: int) -> torch.nn.Module:
    """`Qwen3VLTextModel` (`Qwen3VLMoeTextModel` for a shape with experts) of `layers` layers of `shape` (vocabulary
    cut to 16: only `inputs_embeds` are fed)."""
    common = dict(
        vocab_size=16, hidden_size=shape.hidden, intermediate_size=shape.ffn, num_hidden_layers=layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
        rope_scaling={"rope_type": "default", "mrope_section": rope_sections(shape.head_dim),
                      "mrope_interleaved": True},
        attention_bias=False, use_cache=False)
    if shape.experts is None:
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel

        config, model_class = Qwen3VLTextConfig(**common), Qwen3VLTextModel
    else:
        from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig
        from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextModel

        if shape.experts.shared_expert_ffn:
            raise ValueError("--layers hf: transformers' Qwen3-VL MoE has no shared expert; profile this shape with "
                             "--layers lean")
        config = Qwen3VLMoeTextConfig(**common, num_experts=shape.experts.experts,
                                      num_experts_per_tok=shape.experts.top_k,
                                      moe_intermediate_size=shape.experts.expert_ffn, decoder_sparse_step=1,
                                      mlp_only_layers=[])
        model_class = Qwen3VLMoeTextModel
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return model_class(config).to(device=device, dtype=TORCH_DTYPES[dtype]).train()


def vision_model(encoder: EncoderShape, blocks: int, dtype: str, device: torch.device, seed: int) -> torch.nn.Module:
    """`Qwen3VLVisionModel` of `blocks` blocks of `encoder` (no DeepStack mergers)."""
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    config = Qwen3VLVisionConfig(
        depth=blocks, hidden_size=encoder.hidden, intermediate_size=encoder.mlp, num_heads=encoder.heads,
        in_channels=3, patch_size=encoder.patch_size, spatial_merge_size=encoder.spatial_merge,
        temporal_patch_size=encoder.temporal_patch, out_hidden_size=encoder.out_hidden, deepstack_visual_indexes=[])
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return Qwen3VLVisionModel(config).to(device=device, dtype=TORCH_DTYPES[dtype]).train()


def window_grid(encoder: EncoderShape) -> tuple[int, int]:
    """(h, w) patches of one frame group of the attention window: multiples of the spatial merge, as square as
    the window allows."""
    merge = encoder.spatial_merge
    cells = encoder.attention_window // (merge * merge)
    h = max(d for d in range(1, math.isqrt(cells) + 1) if cells % d == 0)
    return h * merge, cells // h * merge


def _backward(output: torch.Tensor) -> None:
    output.float().square().mean().backward()


def text_samples(model: torch.nn.Module, shape: ModelShape, tokens: int, repeats: Repeats, seed: int) -> tuple[float, ...]:
    """Forward + backward (ms per run) of the text model over one causal document of `tokens` tokens."""
    param = next(model.parameters())
    generator = torch.Generator().manual_seed(seed)
    embeds = torch.randn(1, tokens, shape.hidden, generator=generator).to(device=param.device, dtype=param.dtype)
    embeds.requires_grad_(True)
    # Text positions: the same index on the three mRoPE axes.
    positions = torch.arange(tokens, device=param.device).view(1, 1, -1).expand(3, 1, -1)

    def run() -> None:
        model.zero_grad(set_to_none=True)
        _backward(model(inputs_embeds=embeds, position_ids=positions).last_hidden_state)

    return repeats.time(run).times_ms


def vision_samples(model: torch.nn.Module, encoder: EncoderShape, frame_groups: int, repeats: Repeats,
                   seed: int) -> tuple[float, ...]:
    """Forward + backward (ms per run) of the vision model over one video of `frame_groups` windows."""
    param = next(model.parameters())
    h, w = window_grid(encoder)
    patches = frame_groups * h * w
    width = 3 * encoder.temporal_patch * encoder.patch_size ** 2
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randn(patches, width, generator=generator).to(device=param.device, dtype=param.dtype)
    grid = torch.tensor([[frame_groups, h, w]], device=param.device)

    def run() -> None:
        model.zero_grad(set_to_none=True)
        out = model(pixels, grid_thw=grid)
        _backward(out[0] if isinstance(out, tuple) else out)

    return repeats.time(run).times_ms


@dataclasses.dataclass(frozen=True)
class HFProbes:
    """The Hugging Face models one profiling rank times (built once)."""

    text: dict[int, torch.nn.Module]
    """Layers -> text model."""
    vision: dict[int, torch.nn.Module]
    """Blocks -> vision model (empty: no encoder profiled)."""

    @classmethod
    def build(cls, shape: ModelShape, encoder: EncoderShape | None, dtype: str, device: torch.device,
              seed: int) -> "HFProbes":
        require_transformers()
        text = {layers: text_model(shape, layers, dtype, device, seed) for layers in (1, 2)}
        vision = {} if encoder is None else {blocks: vision_model(encoder, blocks, dtype, device, seed)
                                              for blocks in (1, 2)}
        return cls(text, vision)

