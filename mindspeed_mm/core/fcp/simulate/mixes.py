"""Length mixes beyond the three video datasets: mixed image + video batches and a bimodal mix.

Both are synthetic and named as such (no dataset statistics behind them); they exist to test the
planner and the strategies on shapes the dataset generators do not produce.
- `imagevideo`: 70% single images, 30% InternVid-like clips. An image keeps its aspect ratio and is
  resized to a grid of 32 px tokens holding at most 1,280 and at least 64 tokens [estimate: the
  order of Qwen3-VL's image pixel budget]; resolutions 640x480 / 1024x768 / 1920x1080 at 20 / 50 /
  30%; question + answer text LN(4.0, 0.6) words. Patches: 4 per vision token.
- `bimodal`: 85% short samples of LN(ln 1500, 0.3) tokens, 15% long ones uniform in [40K, 100K]
  tokens; 90% of every sample is vision (4 patches per token), the rest text.
"""
from __future__ import annotations

import numpy as np

from mindspeed_mm.core.fcp.simulate.workloads import (
    DATASETS,
    PATCHES_PER_TOKEN,
    TOKEN_SIDE_PX,
    generate_samples,
    text_token_count,
)

MIXES = ("imagevideo", "bimodal")
"""Synthetic mixes accepted by `draw_lengths`."""
WORKLOADS = (*DATASETS, *MIXES)
"""Every workload name: the dataset generators, then the mixes."""

_IMAGE_SHARE = 0.7
_IMAGE_MAX_TOKENS = 1280
_IMAGE_MIN_TOKENS = 64
_IMAGE_RESOLUTIONS = ((640, 480, 0.2), (1024, 768, 0.5), (1920, 1080, 0.3))
_LONG_SHARE = 0.15


def draw_lengths(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(LLM tokens, vision patches) of `n` samples of workload `name`; the same seed, the same batch."""
    if name in DATASETS:
        samples = generate_samples(name, n, seed)
        return samples.lengths, samples.vision_patches
    if name not in MIXES:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"number of samples n must be a positive integer, got {n!r}")
    rng = np.random.default_rng(int(seed))
    return _imagevideo(rng, int(n), int(seed)) if name == "imagevideo" else _bimodal(rng, int(n))


def _image_tokens(rng: np.random.Generator, n: int) -> np.ndarray:
    pick = rng.choice(len(_IMAGE_RESOLUTIONS), size=n, p=[r[2] for r in _IMAGE_RESOLUTIONS])
    width = np.array([r[0] for r in _IMAGE_RESOLUTIONS], dtype=np.float64)[pick]
    height = np.array([r[1] for r in _IMAGE_RESOLUTIONS], dtype=np.float64)[pick]
    grid = (width / TOKEN_SIDE_PX) * (height / TOKEN_SIDE_PX)
    scale = np.sqrt(np.clip(grid, _IMAGE_MIN_TOKENS, _IMAGE_MAX_TOKENS) / grid)
    cols = np.maximum(1, np.floor(width * scale / TOKEN_SIDE_PX))
    rows = np.maximum(1, np.floor(height * scale / TOKEN_SIDE_PX))
    return (cols * rows).astype(np.int64)


def _imagevideo(rng: np.random.Generator, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    is_image = rng.random(n) < _IMAGE_SHARE
    vision = _image_tokens(rng, n)
    words = np.rint(rng.lognormal(4.0, 0.6, size=n)).astype(np.int64)
    lengths = vision + text_token_count(words)
    patches = vision * PATCHES_PER_TOKEN
    videos = int((~is_image).sum())
    if videos:
        clips = generate_samples("internvid", videos, seed)
        lengths[~is_image] = clips.lengths
        patches[~is_image] = clips.vision_patches
    return lengths.astype(np.int64), patches.astype(np.int64)


def _bimodal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    is_long = rng.random(n) < _LONG_SHARE
    short = rng.lognormal(np.log(1500.0), 0.3, size=n)
    long = rng.uniform(40_000, 100_000, size=n)
    lengths = np.maximum(16, np.rint(np.where(is_long, long, short))).astype(np.int64)
    patches = (np.floor(0.9 * lengths) * PATCHES_PER_TOKEN).astype(np.int64)
    return lengths, patches
