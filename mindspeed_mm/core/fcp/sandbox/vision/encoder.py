"""Qwen3-VL-shaped video encoder from megatron-core blocks: patch embedding, windowed ViT, 2x2 merger.

- Patch embedding: a linear map of each `channels x temporal_patch x patch x patch` pixel patch
  (a Conv3d whose stride equals its kernel, written as the matmul it is).
- Blocks: megatron-core transformer layers (LayerNorm, GELU MLP, biases) whose core attention is full
  attention inside each frame group only (`WindowCoreAttention`), with 2D rotary positions (half of
  a head's frequencies take the patch row, half the patch column).
- Merger: the final LayerNorm, then every `merge^2` consecutive patches concatenated and projected by
  megatron-core's `MultimodalProjector` MLP to the decoder's hidden size, one LLM token each.

Since no attention crosses a frame group, encoding any set of whole frame groups gives exactly the
rows the whole video would give for them: this is what lets FCP split the encoder over a group.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch
import torch.nn.functional as F
from megatron.core.models.vision.multimodal_projector import MultimodalProjector
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.mlp import MLPSubmodules
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlock
from megatron.core.transformer.transformer_config import TransformerConfig
from torch import nn

from mindspeed_mm.core.fcp.sandbox.core_attention import CoreAttentionSlot
from mindspeed_mm.core.fcp.sandbox.run_config import VisionConfig
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout, patch_grid_positions

_ROTARY_BASE = 10000.0


@dataclasses.dataclass
class WindowPackedSeqParams(PackedSeqParams):
    """Attention windows of a batch of concatenated frame groups (megatron-core's THD format)."""

    windows: tuple[int, ...] = ()
    """Patches of each window (frame group), in order; they sum to the batch's patches."""

    def __post_init__(self) -> None:
        if self.qkv_format is None:
            self.qkv_format = "thd"


class WindowCoreAttention(CoreAttentionSlot):
    """Full (non-causal) attention inside each window."""

    def __init__(self, config: TransformerConfig, layer_number: int, attn_mask_type: AttnMaskType,
                 attention_type: str, attention_dropout: float | None = None, softmax_scale: float | None = None,
                 cp_comm_type: str | None = None) -> None:
        super().__init__(config, layer_number, attn_mask_type, attention_type, attention_dropout, softmax_scale)
        if attn_mask_type != AttnMaskType.no_mask:
            raise ValueError(f"WindowCoreAttention attends fully inside each window, got {attn_mask_type}")

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               packed_seq_params: PackedSeqParams | None) -> torch.Tensor:
        """`query/key/value [patches, heads, d]` -> `[patches, heads, d]`."""
        if not isinstance(packed_seq_params, WindowPackedSeqParams):
            raise ValueError("WindowCoreAttention needs WindowPackedSeqParams with the attention windows")
        if sum(packed_seq_params.windows) != query.shape[0]:
            raise ValueError(f"windows cover {sum(packed_seq_params.windows)} patches, the batch has {query.shape[0]}")
        outputs = []
        for q, k, v in zip(*(t.split(packed_seq_params.windows) for t in (query, key, value))):
            # [patches, heads, d] -> [heads, patches, d]
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), scale=self.softmax_scale
            )
            outputs.append(out.transpose(0, 1))
        return torch.cat(outputs)


def vision_rotary_angles(patch_rows: torch.Tensor, patch_cols: torch.Tensor, head_dim: int) -> torch.Tensor:
    """`[patches, 1, head_dim]` 2D rotary angles: half of the frequencies rotate by row, the rest by column."""
    quarter = head_dim // 4
    inv_freq = 1.0 / _ROTARY_BASE ** (torch.arange(quarter, dtype=torch.float32) / quarter)
    freqs = torch.cat(
        [torch.outer(patch_rows.to(torch.float32), inv_freq), torch.outer(patch_cols.to(torch.float32), inv_freq)],
        dim=-1,
    )
    return torch.cat((freqs, freqs), dim=-1).unsqueeze(1)


def vision_transformer_config(vision: VisionConfig, init_method_std: float) -> TransformerConfig:
    """megatron-core config of the vision blocks (LayerNorm, GELU, biases); CPU initialisation."""
    return TransformerConfig(
        num_layers=vision.num_layers,
        hidden_size=vision.hidden_size,
        ffn_hidden_size=vision.ffn_hidden_size,
        num_attention_heads=vision.num_attention_heads,
        normalization="LayerNorm",
        layernorm_epsilon=vision.norm_epsilon,
        gated_linear_unit=False,
        activation_func=F.gelu,
        add_bias_linear=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=init_method_std,
        use_cpu_initialization=True,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        gradient_accumulation_fusion=False,
    )


def _merger_config(vision: VisionConfig, out_hidden: int, init_method_std: float) -> TransformerConfig:
    merged = vision.hidden_size * vision.patches_per_token
    return dataclasses.replace(
        vision_transformer_config(vision, init_method_std),
        num_layers=1,
        hidden_size=out_hidden,
        ffn_hidden_size=merged,
        num_attention_heads=1,
    )


def _window_layer_spec() -> ModuleSpec:
    """megatron-core's local pre-norm layer (LayerNorm) with windowed full attention as its core attention.

    This is the structure of megatron-core's local ViT layer spec, whose module imports Transformer Engine.
    """
    spec = get_gpt_layer_local_spec(normalization="LayerNorm")
    attention = spec.submodules.self_attention
    attention = dataclasses.replace(
        attention,
        params={**attention.params, "attn_mask_type": AttnMaskType.no_mask},
        submodules=dataclasses.replace(attention.submodules, core_attention=WindowCoreAttention),
    )
    return dataclasses.replace(spec, submodules=dataclasses.replace(spec.submodules, self_attention=attention))


@dataclasses.dataclass(frozen=True)
class FrameBatch:
    """Concatenated frame groups to encode in one call."""

    patches: torch.Tensor
    """`[patches, patch_dim]` pixel patches, frame group after frame group, each in merge-window order."""
    windows: tuple[int, ...]
    """Patches of each frame group."""
    patch_rows: torch.Tensor
    """`[patches]` int64 row of each patch in its frame's patch grid."""
    patch_cols: torch.Tensor
    """`[patches]` int64 column of each patch in its frame's patch grid."""

    @classmethod
    def from_frame_groups(
        cls, patches: Sequence[torch.Tensor], layouts: Sequence[VideoSampleLayout]
    ) -> "FrameBatch":
        """Frame groups `patches[i]` of samples with layouts `layouts[i]`."""
        if len(patches) != len(layouts):
            raise ValueError(f"need one layout per frame group: {len(patches)} groups, {len(layouts)} layouts")
        rows, cols = [], []
        for group, layout in zip(patches, layouts):
            if group.shape[0] != layout.patches_per_group:
                raise ValueError(
                    f"a frame group of this layout has {layout.patches_per_group} patches, got {group.shape[0]}"
                )
            r, c = patch_grid_positions(layout.grid_rows, layout.grid_cols, layout.spatial_merge_size)
            rows.append(r)
            cols.append(c)
        return cls(
            patches=torch.cat(list(patches)),
            windows=tuple(int(g.shape[0]) for g in patches),
            patch_rows=torch.cat(rows),
            patch_cols=torch.cat(cols),
        )

    @classmethod
    def from_grids(cls, patches: torch.Tensor, grids: torch.Tensor, merge: int) -> "FrameBatch":
        """Frame groups given as `[patches, patch_dim]` pixel patches of media of patch grids `grids` (`[n, 3]`:
        frame groups, patch rows, patch columns each), merge-window order within each frame group."""
        windows, rows, cols = [], [], []
        for frames, height, width in grids.tolist():
            r, c = patch_grid_positions(height // merge, width // merge, merge)
            windows += [height * width] * frames
            rows += [r] * frames
            cols += [c] * frames
        if sum(windows) != patches.shape[0]:
            raise ValueError(f"grids {grids.tolist()} cover {sum(windows)} patches, got {patches.shape[0]}")
        return cls(patches=patches, windows=tuple(windows), patch_rows=torch.cat(rows), patch_cols=torch.cat(cols))

    def to(self, device: torch.device) -> "FrameBatch":
        """The same batch on `device`."""
        return dataclasses.replace(
            self, patches=self.patches.to(device), patch_rows=self.patch_rows.to(device),
            patch_cols=self.patch_cols.to(device),
        )


class VisionEncoder(MegatronModule):
    """Frame groups -> merged vision tokens in the decoder's hidden size."""

    def __init__(self, vision: VisionConfig, out_hidden: int, init_method_std: float) -> None:
        config = vision_transformer_config(vision, init_method_std)
        super().__init__(config=config)
        self.vision = vision
        self.patch_embed = nn.Linear(vision.patch_dim, vision.hidden_size)
        self.blocks = TransformerBlock(config, _window_layer_spec(), post_layer_norm=True)
        self.merger = MultimodalProjector(
            _merger_config(vision, out_hidden, init_method_std),
            MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear),
            projector_type="mlp",
            input_size=vision.hidden_size * vision.patches_per_token,
        )

    def forward(self, frames: FrameBatch) -> torch.Tensor:
        """`[patches / merge^2, out_hidden]` merged tokens of `frames`, frame group after frame group."""
        hidden = self.patch_embed(frames.patches).unsqueeze(1)  # [patches, b=1, vision hidden]
        rotary = vision_rotary_angles(frames.patch_rows, frames.patch_cols, self.vision.head_dim).to(hidden.device)
        windows = WindowPackedSeqParams(windows=frames.windows)
        hidden = self.blocks(hidden, attention_mask=None, rotary_pos_emb=rotary, packed_seq_params=windows)
        # [patches, 1, vision hidden] -> [patches / merge^2, 1, merge^2 * vision hidden]
        merged = hidden.reshape(-1, 1, self.vision.patches_per_token * self.vision.hidden_size)
        return self.merger(merged).squeeze(1)
