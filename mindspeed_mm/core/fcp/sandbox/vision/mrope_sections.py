"""Which rotary frequencies of a decoder head take the temporal, height and width position (mRoPE).

Qwen3-VL interleaves the three axes over the frequencies instead of giving each axis one contiguous
block: frequency j takes the height position when j % 3 == 1 and j < 3 * height, the width position
when j % 3 == 2 and j < 3 * width, and the temporal position otherwise. Every axis then spans low
and high frequencies alike. Pure Python, so the configuration can check sections without torch.
"""
from __future__ import annotations

TEMPORAL, HEIGHT, WIDTH = 0, 1, 2
"""Axis numbers, also the column order of mRoPE position ids."""


def interleaved_mrope_axes(sections: tuple[int, int, int]) -> tuple[int, ...]:
    """Axis of every rotary frequency for (temporal, height, width) section sizes.

    Raises ValueError when a section is not positive or the interleaving cannot give each axis
    exactly its section (a spatial section larger than about a third of the frequencies).
    """
    temporal, height, width = sections
    if min(sections) < 1:
        raise ValueError(f"mRoPE sections must be positive, got {sections}")
    frequencies = temporal + height + width
    axes = tuple(
        HEIGHT if j % 3 == 1 and j < 3 * height else WIDTH if j % 3 == 2 and j < 3 * width else TEMPORAL
        for j in range(frequencies)
    )
    counts = (axes.count(TEMPORAL), axes.count(HEIGHT), axes.count(WIDTH))
    if counts != tuple(sections):
        raise ValueError(
            f"mRoPE sections {sections} cannot be interleaved over {frequencies} frequencies "
            f"(the interleaving gives {counts}); keep each spatial section below a third of the frequencies"
        )
    return axes
