"""The demo trainer's vision encoder as `fcp profile` times it: a call of whole frame groups of a preset's shape.

The encoder (`vision.encoder.VisionEncoder`: patch embedding, windowed ViT blocks, one merger; a preset's
DeepStack mergers are not built) is built from a model preset's `EncoderShape`.
"""
from __future__ import annotations

import math

import torch

from mindspeed_mm.core.fcp.cost.shapes import EncoderShape
from mindspeed_mm.core.fcp.profiler.compute import Repeats
from mindspeed_mm.core.fcp.profiler.decoder import TORCH_DTYPES
from mindspeed_mm.core.fcp.profiler.memory import saved_tensor_bytes
from mindspeed_mm.core.fcp.profiler.timing import Samples
from mindspeed_mm.core.fcp.sandbox.config_sections import VisionConfig
from mindspeed_mm.core.fcp.sandbox.vision.encoder import FrameBatch, VisionEncoder
from mindspeed_mm.core.fcp.sandbox.vision.layout import patch_grid_positions

_INIT_STD = 0.02
_CHANNELS = 3


def window_grid(shape: EncoderShape) -> tuple[int, int]:
    """(rows, columns) of merged tokens of the most nearly square frame whose patches fill the attention window."""
    tokens, remainder = divmod(shape.attention_window, shape.patches_per_token)
    if remainder or tokens == 0:
        raise ValueError(f"the encoder's attention window ({shape.attention_window} patches) is not a whole number "
                         f"of merged tokens of {shape.patches_per_token} patches")
    rows = max(r for r in range(1, math.isqrt(tokens) + 1) if tokens % r == 0)
    return rows, tokens // rows


def vision_config(shape: EncoderShape) -> VisionConfig:
    """The executor's encoder configuration of a preset's encoder shape (RGB frames)."""
    return VisionConfig(num_layers=shape.depth, hidden_size=shape.hidden, ffn_hidden_size=shape.mlp,
                        num_attention_heads=shape.heads, patch_size=shape.patch_size,
                        temporal_patch_size=shape.temporal_patch, spatial_merge_size=shape.spatial_merge,
                        in_channels=_CHANNELS)


def probe_frames(shape: EncoderShape, groups: int, dtype: torch.dtype, device: torch.device,
                 generator: torch.Generator) -> FrameBatch:
    """`groups` frame groups of random pixels, each filling the attention window."""
    rows, cols = window_grid(shape)
    config = vision_config(shape)
    patch_rows, patch_cols = patch_grid_positions(rows, cols, shape.spatial_merge)
    window = shape.attention_window
    pixels = torch.randn(groups * window, config.patch_dim, generator=generator, dtype=dtype)
    return FrameBatch(patches=pixels.to(device), windows=(window,) * groups,
                      patch_rows=patch_rows.repeat(groups).to(device), patch_cols=patch_cols.repeat(groups).to(device))


class EncoderProbe:
    """One rank's encoder and the calls it times (megatron-core's model-parallel state must be initialised)."""

    def __init__(self, shape: EncoderShape, dtype: str, device: torch.device, seed: int) -> None:
        self.shape = shape
        self.dtype = TORCH_DTYPES[dtype]
        self.device = device
        torch.manual_seed(seed)
        self.encoder = VisionEncoder(vision_config(shape), shape.out_hidden, _INIT_STD).to(device=device,
                                                                                          dtype=self.dtype)
        self.generator = torch.Generator().manual_seed(seed)

    def frames(self, groups: int) -> FrameBatch:
        """`groups` frame groups of the attention window."""
        return probe_frames(self.shape, groups, self.dtype, self.device, self.generator)

    def samples(self, groups: int, repeats: Repeats) -> Samples:
        """Forward + backward of one call on `groups` frame groups."""
        frames = self.frames(groups)

        def run() -> None:
            self.encoder(frames).float().square().mean().backward()

        out = repeats.time(run)
        self.encoder.zero_grad(set_to_none=True)
        return out

    def saved_bytes(self, groups: int) -> int:
        """Bytes of the distinct tensors autograd keeps for backward in one call on `groups` frame groups."""
        frames = self.frames(groups)
        return saved_tensor_bytes(self.encoder, lambda: self.encoder(frames).float().square().mean())

    def activation_bytes_per_token(self, low: int, high: int) -> float:
        """Saved bytes per merged token: the difference between calls of `high` and `low` frame groups."""
        tokens = (high - low) * self.shape.attention_window // self.shape.patches_per_token
        return max((self.saved_bytes(high) - self.saved_bytes(low)) / tokens, 0.0)
