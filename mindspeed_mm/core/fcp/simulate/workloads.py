"""Sample-length workloads: seeded generators for three video datasets, length files, CPU scaling.

Real video datasets are not available where plans are simulated, so each generator draws a clip
duration, a resolution and a caption length (independently, from distributions fitted to the
published dataset statistics) and turns them into LLM tokens with the Qwen3-VL video rule
(`video_token_counts`). The same seed always gives the same lengths.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.lengths import checked_sample_lengths

logger = logging.getLogger(__name__)

DATASETS = ("msrvtt", "internvid", "openvid")
"""Names accepted by `generate` and `generate_samples`."""

# Qwen3-VL vision front end: 16 px patches merged 2x2 into one LLM token (32 px per token side),
# two consecutive frames share one temporal patch.
TOKEN_SIDE_PX = 32
PATCHES_PER_TOKEN = 4
FRAMES_PER_TEMPORAL_PATCH = 2
# Frame sampling (qwen-vl-utils defaults): 2 fps from a 30 fps source, 4..768 frames, even counts.
SAMPLE_FPS = 2.0
SOURCE_FPS = 30.0
MIN_FRAMES = 4
MAX_FRAMES = 768
# Per temporal patch the merged token grid holds 128..768 tokens; the whole clip at most 115,200.
MIN_TOKENS_PER_FRAME = 128
MAX_TOKENS_PER_FRAME = 768
VIDEO_TOKEN_BUDGET = 115_200
# Slack on the lower bound of a shrunk per-frame budget, as in qwen-vl-utils.
_MIN_BUDGET_SLACK = 1.05
TIMESTAMP_TOKENS_PER_GROUP = 8
TEXT_TOKENS_PER_WORD = 1.3
TEXT_TEMPLATE_TOKENS = 25


@dataclass(frozen=True)
class VideoTokenCounts:
    """LLM-side token counts of video clips under the Qwen3-VL rule (one entry per clip)."""

    frames: np.ndarray
    """Sampled frames per clip (even, 4..768)."""
    grid_height: np.ndarray
    """Merged-token rows per temporal patch (resized height / 32)."""
    grid_width: np.ndarray
    """Merged-token columns per temporal patch (resized width / 32)."""
    vision_tokens: np.ndarray
    """Video tokens fed to the LLM: (frames / 2) * grid_height * grid_width."""
    timestamp_tokens: np.ndarray
    """Timestamp / delimiter tokens: 8 per temporal group."""
    vision_patches: np.ndarray
    """Vision-encoder sequence length (16 px patches before the 2x2 merge): 4 x vision_tokens."""


@dataclass(frozen=True)
class SampleBatch:
    """Generated samples with their metadata (one entry per sample, all arrays of equal length)."""

    dataset: str
    """Generator name, one of `DATASETS`."""
    lengths: np.ndarray
    """LLM tokens per sample (int64): vision + timestamp + text tokens."""
    durations_s: np.ndarray
    """Clip duration in seconds."""
    source_height: np.ndarray
    """Original frame height in pixels."""
    source_width: np.ndarray
    """Original frame width in pixels."""
    resized_height: np.ndarray
    """Frame height after resizing to the token grid, in pixels (multiple of 32)."""
    resized_width: np.ndarray
    """Frame width after resizing to the token grid, in pixels (multiple of 32)."""
    frames: np.ndarray
    """Sampled frames per clip."""
    caption_words: np.ndarray
    """Words in the caption."""
    vision_tokens: np.ndarray
    """Video tokens in the LLM sequence."""
    timestamp_tokens: np.ndarray
    """Timestamp / delimiter tokens in the LLM sequence."""
    text_tokens: np.ndarray
    """Caption plus chat-template tokens."""
    vision_patches: np.ndarray
    """Vision-encoder patches per sample (the ViT's sequence length)."""

    def __len__(self) -> int:
        return int(self.lengths.shape[0])


def _floor_even(x: np.ndarray) -> np.ndarray:
    return (np.floor(np.asarray(x, dtype=np.float64) / 2.0) * 2.0).astype(np.int64)


def sampled_frame_count(duration_s: np.ndarray | float) -> np.ndarray:
    """Frames sampled from a clip: 2 fps, at least 4, at most min(768, source frames), even."""
    duration = np.asarray(duration_s, dtype=np.float64)
    if np.any(~np.isfinite(duration)) or np.any(duration <= 0):
        raise ValueError("duration_s must be finite and positive")
    upper = _floor_even(np.minimum(MAX_FRAMES, SOURCE_FPS * duration))
    wanted = np.maximum(SAMPLE_FPS * duration, MIN_FRAMES)
    return _floor_even(np.minimum(wanted, upper))


def resize_to_token_grid(
    height: np.ndarray | int, width: np.ndarray | int, max_tokens: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """Token grid (rows, columns) of a frame resized with its aspect kept and sides multiples of 32.

    The sides are first rounded to the nearest multiple of 32; if the grid then holds more than
    `max_tokens` tokens (or fewer than `MIN_TOKENS_PER_FRAME`) both sides are scaled by the same
    factor and rounded down (up) so the grid fits the budget.
    """
    h = np.asarray(height, dtype=np.float64)
    w = np.asarray(width, dtype=np.float64)
    budget = np.asarray(max_tokens, dtype=np.float64)
    if np.any(h <= 0) or np.any(w <= 0):
        raise ValueError("frame height and width must be positive")
    side = float(TOKEN_SIDE_PX)
    rows = np.maximum(1.0, np.floor(h / side + 0.5))
    cols = np.maximum(1.0, np.floor(w / side + 0.5))
    pixels = h * w
    too_big = rows * cols > budget
    too_small = rows * cols < MIN_TOKENS_PER_FRAME
    shrink = np.sqrt(pixels / (budget * side * side))
    rows = np.where(too_big, np.maximum(1.0, np.floor(h / shrink / side)), rows)
    cols = np.where(too_big, np.maximum(1.0, np.floor(w / shrink / side)), cols)
    grow = np.sqrt(MIN_TOKENS_PER_FRAME * side * side / pixels)
    rows = np.where(too_small & ~too_big, np.ceil(h * grow / side), rows)
    cols = np.where(too_small & ~too_big, np.ceil(w * grow / side), cols)
    return rows.astype(np.int64), cols.astype(np.int64)


def video_token_counts(
    duration_s: np.ndarray | float, height: np.ndarray | int, width: np.ndarray | int
) -> VideoTokenCounts:
    """Qwen3-VL token counts of clips of the given duration and source resolution.

    Long clips share the whole-video budget: the per-temporal-patch budget shrinks to
    115,200 / (frames / 2) tokens (never below 1.05 x 128), so a clip stays within about 115,200
    video tokens.
    """
    frames = sampled_frame_count(duration_s)
    groups = frames // FRAMES_PER_TEMPORAL_PATCH
    budget = np.maximum(
        np.minimum(MAX_TOKENS_PER_FRAME, VIDEO_TOKEN_BUDGET / groups),
        MIN_TOKENS_PER_FRAME * _MIN_BUDGET_SLACK,
    )
    rows, cols = resize_to_token_grid(height, width, budget)
    vision = groups * rows * cols
    return VideoTokenCounts(
        frames=frames,
        grid_height=rows,
        grid_width=cols,
        vision_tokens=vision,
        timestamp_tokens=groups * TIMESTAMP_TOKENS_PER_GROUP,
        vision_patches=vision * PATCHES_PER_TOKEN,
    )


def text_token_count(words: np.ndarray | int) -> np.ndarray:
    """Caption plus chat-template tokens: ceil(1.3 x words) + 25."""
    w = np.asarray(words, dtype=np.int64)
    if np.any(w < 0):
        raise ValueError("caption word counts must be non-negative")
    # Integer arithmetic avoids ceil(1.3 * 10) = 14 from floating-point error.
    return (13 * w + 9) // 10 + TEXT_TEMPLATE_TOKENS


@dataclass(frozen=True)
class _Draws:
    durations_s: np.ndarray
    height: np.ndarray
    width: np.ndarray
    words: np.ndarray


def _pick_resolution(
    rng: np.random.Generator, n: int, mix: Sequence[tuple[int, int, float]]
) -> tuple[np.ndarray, np.ndarray]:
    """Draw (height, width) from a mixture of (width, height, probability)."""
    widths = np.array([m[0] for m in mix], dtype=np.int64)
    heights = np.array([m[1] for m in mix], dtype=np.int64)
    choice = rng.choice(len(mix), size=n, p=np.array([m[2] for m in mix]))
    return heights[choice], widths[choice]


def _caption_words(
    rng: np.random.Generator, n: int, mu: float, sigma: float, low: int, high: int | None
) -> np.ndarray:
    words = np.rint(rng.lognormal(mu, sigma, size=n)).astype(np.int64)
    return np.clip(words, low, high if high is not None else np.iinfo(np.int64).max)


def _draw_msrvtt(rng: np.random.Generator, n: int) -> _Draws:
    durations = np.minimum(10.0 + rng.lognormal(1.286, 0.75, size=n), 32.0)
    height, width = _pick_resolution(rng, n, [(320, 240, 1.0)])
    return _Draws(durations, height, width, _caption_words(rng, n, 2.169, 0.35, 2, 40))


def _lognormal_in_range(
    rng: np.random.Generator, n: int, mu: float, sigma: float, low: float, high: float
) -> np.ndarray:
    """Log-normal draws restricted to [low, high] by redrawing the ones outside."""
    values = rng.lognormal(mu, sigma, size=n)
    outside = (values < low) | (values > high)
    while np.any(outside):
        values[outside] = rng.lognormal(mu, sigma, size=int(outside.sum()))
        outside = (values < low) | (values > high)
    return values


def _draw_internvid(rng: np.random.Generator, n: int) -> _Draws:
    is_long = rng.random(size=n) >= 0.85
    short = _lognormal_in_range(rng, n, 1.504, 0.55, 1.0, 10.0)
    long = np.minimum(10.0 + rng.lognormal(3.258, 1.0, size=n), 300.0)
    durations = np.where(is_long, long, short)
    height, width = _pick_resolution(rng, n, [(1280, 720, 0.85), (854, 480, 0.10), (640, 360, 0.05)])
    return _Draws(durations, height, width, _caption_words(rng, n, 2.485, 0.416, 1, None))


def _draw_openvid(rng: np.random.Generator, n: int) -> _Draws:
    durations = np.clip(rng.lognormal(1.794, 0.6, size=n), 1.0, 98.0)
    height, width = _pick_resolution(rng, n, [(1920, 1080, 0.42), (1280, 720, 0.45), (960, 540, 0.13)])
    return _Draws(durations, height, width, _caption_words(rng, n, 4.779, 0.35, 8, 500))


_GENERATORS: dict[str, Callable[[np.random.Generator, int], _Draws]] = {
    "msrvtt": _draw_msrvtt,
    "internvid": _draw_internvid,
    "openvid": _draw_openvid,
}


def generate_samples(name: str, n: int, seed: int) -> SampleBatch:
    """Draw `n` samples of dataset `name` with their metadata; the same seed gives the same batch."""
    if name not in _GENERATORS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"number of samples n must be a positive integer, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    draws = _GENERATORS[name](np.random.default_rng(int(seed)), int(n))
    video = video_token_counts(draws.durations_s, draws.height, draws.width)
    text = text_token_count(draws.words)
    lengths = (video.vision_tokens + video.timestamp_tokens + text).astype(np.int64)
    return SampleBatch(
        dataset=name,
        lengths=lengths,
        durations_s=draws.durations_s,
        source_height=draws.height,
        source_width=draws.width,
        resized_height=video.grid_height * TOKEN_SIDE_PX,
        resized_width=video.grid_width * TOKEN_SIDE_PX,
        frames=video.frames,
        caption_words=draws.words,
        vision_tokens=video.vision_tokens,
        timestamp_tokens=video.timestamp_tokens,
        text_tokens=text,
        vision_patches=video.vision_patches,
    )


def generate(name: str, n: int, seed: int) -> np.ndarray:
    """LLM token lengths (int64) of `n` samples of dataset `name`; see `generate_samples`."""
    return generate_samples(name, n, seed).lengths


_MAX_LENGTH = int(np.iinfo(np.int64).max)


def _parse_length(text: str, where: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{where}: expected a positive integer sample length, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"{where}: sample length must be positive, got {value}")
    if value > _MAX_LENGTH:
        raise ValueError(f"{where}: sample length {value} exceeds the largest supported length {_MAX_LENGTH} (int64)")
    return value


def load_lengths(path: str | Path) -> np.ndarray:
    """Read sample lengths from a file: one integer per line, or one JSON list of integers.

    Blank lines are allowed between lines of integers; anything else that is not a positive
    integer raises ValueError naming the file and the line (or list index).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"{file}: cannot read lengths file ({err.strerror or err})") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{file}:{err.lineno}: invalid JSON ({err.msg})") from None
        if not isinstance(items, list):
            raise ValueError(f"{file}: expected a JSON list of integers")
        lengths = []
        for index, item in enumerate(items):
            where = f"{file}: item {index}"
            if isinstance(item, bool) or not isinstance(item, int):
                raise ValueError(f"{where}: expected a positive integer sample length, got {item!r}")
            lengths.append(_parse_length(str(item), where))
    else:
        lengths = [
            _parse_length(line.strip(), f"{file}:{number}")
            for number, line in enumerate(text.splitlines(), start=1)
            if line.strip()
        ]
    if not lengths:
        raise ValueError(f"{file}: no sample lengths found")
    return np.asarray(lengths, dtype=np.int64)


def scale_lengths(lengths: Sequence[int] | np.ndarray, factor: float, min_tokens: int) -> np.ndarray:
    """Shrink lengths for CPU runs: ceil(length / factor), raised to at least `min_tokens`.

    The shape of the distribution is kept; how many samples were raised to `min_tokens` is logged.
    """
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"scale factor must be a positive finite number, got {factor!r}")
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, (int, np.integer)) or min_tokens <= 0:
        raise ValueError(f"min_tokens must be a positive integer, got {min_tokens!r}")
    values = checked_sample_lengths(lengths)
    scaled = np.ceil(values.astype(np.float64) / factor).astype(np.int64)
    raised = int(np.count_nonzero(scaled < min_tokens))
    if raised:
        logger.info("scale_lengths: %d of %d samples raised to min_tokens=%d", raised, values.size, min_tokens)
    return np.maximum(scaled, int(min_tokens))
