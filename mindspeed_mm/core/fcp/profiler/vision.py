"""The vision encoder's figures: per-call and per-patch cost, activations per merged token.

A timed call encodes `g` frame groups of the shape's attention window; the table's per-call and per-patch
figures are the line through the calls of several `g` (`fitting.fit_line`). The encoder timed is the demo
trainer's Qwen3-VL-shaped one with the shape of a model preset (`encoder_probe`, the one place the product
reaches into the demo trainer, only when a vision term is measured).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mindspeed_mm.core.fcp.cost.shapes import EncoderShape
from mindspeed_mm.core.fcp.profiler.fitting import fit_line

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.sandbox.vision.encoder_probe import EncoderProbe

@contextlib.contextmanager
def model_parallel_state() -> Iterator[None]:
    """megatron-core's model-parallel state (TP = PP = 1 over the world) that the encoder's layers read."""
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    try:
        yield
    finally:
        parallel_state.destroy_model_parallel()


@dataclass(frozen=True)
class VisionFigures:
    """What the table keeps of the encoder measurements."""

    ms_per_call: float
    """Fixed forward + backward cost of one call."""
    ms_per_patch: float
    """Forward + backward cost of one more patch."""
    activation_bytes_per_token: float
    """Activations kept for backward per merged (LLM) token."""


def encoder_probe(shape: EncoderShape, dtype: str, device: torch.device, seed: int) -> "EncoderProbe":
    """The probe of the encoder the demo trainer trains, built with `shape` (megatron-core's model-parallel
    state must be initialised). That encoder is part of the demo trainer; without it, profile with --no-vision."""
    try:
        from mindspeed_mm.core.fcp.sandbox.vision.encoder_probe import EncoderProbe
    except ImportError as error:
        raise ValueError(f"measuring the vision encoder needs the demo trainer's encoder, which is not installed "
                         f"here ({error}); pass --no-vision for a text-only table") from None
    return EncoderProbe(shape, dtype, device, seed)


def vision_figures(shape: EncoderShape, frame_groups: tuple[int, ...], call_ms: dict[int, float],
                   activation_bytes_per_token: float) -> VisionFigures:
    """The table's figures from the summarised call times per frame-group count."""
    patches = [groups * shape.attention_window for groups in frame_groups]
    per_call, per_patch = fit_line(patches, [call_ms[groups] for groups in frame_groups])
    return VisionFigures(per_call, per_patch, activation_bytes_per_token)
