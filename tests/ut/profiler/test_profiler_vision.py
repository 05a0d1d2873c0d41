"""The profiler's vision-encoder probe: frames the encoder FCP trains takes as whole frame groups, the
activations it keeps, and the line through the calls."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch

from mindspeed_mm.core.fcp.cost.presets import MODELS
from mindspeed_mm.core.fcp.sandbox.distributed import init_distributed, shutdown_distributed
from mindspeed_mm.core.fcp.profiler.vision import vision_figures
from mindspeed_mm.core.fcp.sandbox.vision.encoder_probe import EncoderProbe, probe_frames, window_grid

SHAPE = MODELS["tiny"].encoder


@pytest.fixture(scope="module")
def probe() -> Iterator[EncoderProbe]:
    init_distributed(force_cpu=True)   # a one-process world with megatron-core's TP = PP = 1 state
    yield EncoderProbe(SHAPE, "fp32", torch.device("cpu"), seed=0)
    shutdown_distributed()


def test_the_window_is_the_most_nearly_square_frame_of_whole_merged_tokens() -> None:
    assert window_grid(SHAPE) == (3, 5)                      # 60 patches = 15 tokens of 2 x 2
    assert window_grid(dataclasses.replace(SHAPE, attention_window=64)) == (4, 4)
    assert window_grid(dataclasses.replace(SHAPE, attention_window=2880)) == (24, 30)
    with pytest.raises(ValueError, match="not a whole number of merged tokens of 4 patches"):
        window_grid(dataclasses.replace(SHAPE, attention_window=62))


def test_a_call_of_several_frame_groups_encodes_each_as_alone(probe: EncoderProbe) -> None:
    # Attention stays inside a frame group, so the probe's batch is a batch of independent windows.
    frames = probe_frames(SHAPE, 3, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(1))
    window, tokens = SHAPE.attention_window, SHAPE.attention_window // SHAPE.patches_per_token
    assert frames.patches.shape[0] == 3 * window and frames.windows == (window,) * 3
    with torch.no_grad():
        together = probe.encoder(frames)
        for group in range(3):
            rows = slice(group * window, (group + 1) * window)
            alone = dataclasses.replace(frames, patches=frames.patches[rows], windows=(window,),
                                        patch_rows=frames.patch_rows[rows], patch_cols=frames.patch_cols[rows])
            torch.testing.assert_close(probe.encoder(alone), together[group * tokens:(group + 1) * tokens])


def test_saved_activations_grow_with_the_frame_groups(probe: EncoderProbe) -> None:
    one, two, four = (probe.saved_bytes(groups) for groups in (1, 2, 4))
    assert 0 < one < two < four
    # Affine in the patches: every frame group adds the same bytes (to the allocator's rounding).
    assert four - two == pytest.approx(2 * (two - one), rel=0.02)
    per_token = probe.activation_bytes_per_token(1, 4)
    assert per_token == pytest.approx((four - one) / (3 * SHAPE.attention_window / SHAPE.patches_per_token))
    # At least the fp32 hidden states of every block's input and its MLP, per patch of the token.
    assert per_token > SHAPE.patches_per_token * SHAPE.depth * 4 * (SHAPE.hidden + SHAPE.mlp)


def test_the_figures_are_the_line_through_the_calls() -> None:
    groups = (1, 2, 4, 8)
    calls = {g: 1.5 + 0.004 * g * SHAPE.attention_window for g in groups}
    figures = vision_figures(SHAPE, groups, calls, 123.0)
    assert figures.ms_per_call == pytest.approx(1.5) and figures.ms_per_patch == pytest.approx(0.004)
    assert figures.activation_bytes_per_token == 123.0
