"""Synthetic video-caption dataset: workload-shaped clips scaled down for CPU runs, random pixels.

Per sample, a workload generator (e.g. OpenVid-like) draws the sampled frames, the frame's merged
token grid and the caption length; `VideoDataConfig` scales them down. The layout (and so the LLM
length, the loss tokens and the vision patches) is metadata known before anything is loaded: the
planner needs it. Text tokens come from a generator seeded by (seed, sample index); the pixels of
each frame group from one seeded by (seed, sample index, frame group), so a rank loads exactly the
frame groups it encodes. Sample i's metadata depends only on (data seed, i), not on the run length.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from mindspeed_mm.core.fcp.sandbox.run_config import DataConfig, RunConfig, VideoDataConfig, VisionConfig
from mindspeed_mm.core.fcp.sandbox.text_dataset import (
    LENGTH_BLOCK, RECURRENCE_PROBABILITY, PlannedLengths, Sample, affine_recurrence, block_seed,
)
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout, mrope_position_ids
from mindspeed_mm.core.fcp.simulate.workloads import (
    FRAMES_PER_TEMPORAL_PATCH,
    TOKEN_SIDE_PX,
    SampleBatch,
    generate_samples,
)

logger = logging.getLogger(__name__)

VISION_TOKEN_ID = 0
"""Input id of a vision token (its embedding is replaced by the encoder's); text ids are 1..vocab-1."""


@dataclass(frozen=True)
class VideoSample(Sample):
    """The text side of a video-caption sample; its pixels are loaded per frame group."""

    layout: VideoSampleLayout
    """Token layout of the sample."""
    vision_mask: torch.Tensor
    """`[length]` bool, True at vision tokens."""
    mrope_position_ids: torch.Tensor
    """`[length, 3]` int64 (temporal, height, width) position ids of the whole sample."""


def patchify_frames(frames: torch.Tensor, merge: int, patch: int) -> torch.Tensor:
    """`[time, channel, height, width]` frames -> `[patches, channel * time * patch * patch]` in merge-window order.

    Height and width must be multiples of `merge * patch`; patch i covers the pixels at row
    `patch_grid_positions(...)[0][i]` and column `[1][i]` of the patch grid.
    """
    time, channels, height, width = frames.shape
    side = merge * patch
    if height % side or width % side:
        raise ValueError(f"frame size {height}x{width} must be a multiple of merge x patch = {side} pixels")
    rows, cols = height // side, width // side
    # [time, channel, row, sub_row, pixel_row, col, sub_col, pixel_col]
    grid = frames.reshape(time, channels, rows, merge, patch, cols, merge, patch)
    # -> [row, col, sub_row, sub_col | channel, time, pixel_row, pixel_col]
    patches = grid.permute(2, 5, 3, 6, 1, 0, 4, 7)
    return patches.reshape(rows * cols * merge * merge, channels * time * patch * patch).contiguous()


def _first_samples(blocks: list[SampleBatch], count: int) -> SampleBatch:
    """The first `count` samples of the concatenated blocks."""
    arrays = {
        f.name: np.concatenate([getattr(b, f.name) for b in blocks])[:count]
        for f in dataclasses.fields(SampleBatch)
        if f.name != "dataset"
    }
    return SampleBatch(dataset=blocks[0].dataset, **arrays)


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def _scaled(values: np.ndarray, scale: float) -> np.ndarray:
    return np.maximum(1, np.ceil(values.astype(np.float64) / scale)).astype(np.int64)


def video_layouts(
    clips: SampleBatch, video: VideoDataConfig, spatial_merge_size: int, seq_length: int
) -> tuple[VideoSampleLayout, ...]:
    """Layouts of generated clips scaled down by `video`; a sample longer than `seq_length` keeps only
    the frame groups that fit (logged).

    Frame groups = ceil((frames / 2) / frame_scale), grid rows and columns = ceil(merged-token rows /
    grid_scale) (likewise columns), caption = max(min_caption_tokens, ceil(text tokens / text_scale)),
    the prompt is `prompt_tokens`. Raises ValueError naming the first sample that cannot fit one frame group.
    """
    groups = _scaled(clips.frames // FRAMES_PER_TEMPORAL_PATCH, video.frame_scale)
    rows = _scaled(clips.resized_height // TOKEN_SIDE_PX, video.grid_scale)
    cols = _scaled(clips.resized_width // TOKEN_SIDE_PX, video.grid_scale)
    captions = np.maximum(video.min_caption_tokens, np.ceil(clips.text_tokens / video.text_scale)).astype(np.int64)
    room = seq_length - video.prompt_tokens - captions
    too_long = np.flatnonzero(room < rows * cols)
    if too_long.size:
        i = int(too_long[0])
        raise ValueError(
            f"video sample {i}: prompt {video.prompt_tokens} + one frame group of {rows[i]}x{cols[i]} tokens + "
            f"caption {captions[i]} exceed gpt_args.seq_length={seq_length}; raise seq_length or "
            "vision.grid_scale / text_scale"
        )
    fitting = room // (rows * cols)
    truncated = int(np.count_nonzero(groups > fitting))
    if truncated:
        logger.info("video dataset %s: %d of %d samples keep only the frame groups that fit seq_length=%d",
                    clips.dataset, truncated, len(clips), seq_length)
    return tuple(
        VideoSampleLayout(
            prompt_tokens=video.prompt_tokens,
            frame_groups=int(g),
            grid_rows=int(r),
            grid_cols=int(c),
            caption_tokens=int(t),
            spatial_merge_size=spatial_merge_size,
        )
        for g, r, c, t in zip(np.minimum(groups, fitting), rows, cols, captions)
    )


class VideoCaptionDataset(PlannedLengths):
    """`num_samples` video-caption samples shaped by the configured workload generator."""

    def __init__(
        self,
        data: DataConfig,
        video: VideoDataConfig,
        vision: VisionConfig,
        *,
        num_samples: int,
        seq_length: int,
        vocab_size: int,
        token_seed: int,
    ) -> None:
        if num_samples <= 0:
            raise ValueError(f"num_samples must be positive, got {num_samples}")
        if vocab_size < 2:
            raise ValueError(
                f"vocab_size must leave text ids besides the vision id {VISION_TOKEN_ID}, got {vocab_size}"
            )
        blocks = [generate_samples(data.dataset, LENGTH_BLOCK, block_seed(data.seed, b))
                  for b in range(math.ceil(num_samples / LENGTH_BLOCK))]
        self._layouts = video_layouts(_first_samples(blocks, num_samples), video, vision.spatial_merge_size, seq_length)
        self._lengths = np.array([layout.length for layout in self._layouts], dtype=np.int64)
        # Every label from the last vision token on is a caption token or the closing token.
        self._loss_tokens = np.array([layout.caption_tokens + 1 for layout in self._layouts], dtype=np.int64)
        self._patches = np.array([layout.vision_patches for layout in self._layouts], dtype=np.int64)
        for array in (self._lengths, self._loss_tokens, self._patches):
            array.setflags(write=False)
        self._vision = vision
        self._vocab_size = vocab_size
        self._token_seed = token_seed

    @property
    def vision_patches(self) -> np.ndarray:
        """Read-only int64 vision-encoder patches of every sample (what the planner's vision term needs)."""
        return self._patches

    def layout(self, index: int) -> VideoSampleLayout:
        """Token layout of sample `index` (metadata only)."""
        self._check(index)
        return self._layouts[index]

    def __getitem__(self, index: int) -> VideoSample:
        layout = self.layout(index)
        generator = torch.Generator().manual_seed(_seed(self._token_seed, index))
        text_ids = self._vocab_size - 1
        prompt = 1 + torch.randint(text_ids, (layout.prompt_tokens,), generator=generator)
        # The caption plus one closing token, the last label.
        noise = (1 + torch.randint(text_ids, (layout.caption_tokens + 1,), generator=generator)).tolist()
        follow = (torch.rand(layout.caption_tokens + 1, generator=generator) < RECURRENCE_PROBABILITY).tolist()
        caption = affine_recurrence(noise, follow, text_ids, offset=1)
        vision = torch.full((layout.vision_tokens,), VISION_TOKEN_ID, dtype=torch.int64)
        sequence = torch.cat([prompt, vision, torch.tensor(caption, dtype=torch.int64)])
        loss_mask = torch.zeros(layout.length, dtype=torch.float32)
        loss_mask[layout.caption_start - 1 :] = 1.0
        vision_mask = torch.zeros(layout.length, dtype=torch.bool)
        vision_mask[layout.vision_start : layout.caption_start] = True
        return VideoSample(
            index=index,
            tokens=sequence[:-1].clone(),
            labels=sequence[1:].clone(),
            loss_mask=loss_mask,
            layout=layout,
            vision_mask=vision_mask,
            mrope_position_ids=mrope_position_ids(layout),
        )

    def frame_group(self, index: int, group: int) -> torch.Tensor:
        """`[patches_per_group, patch_dim]` patches of frame group `group` of sample `index`.

        The frames are random pixels of `temporal_patch_size x channels x height x width`, cut into
        `temporal x patch x patch` patches in merge-window order (see `layout.patch_grid_positions`).
        """
        layout = self.layout(index)
        if not 0 <= group < layout.frame_groups:
            raise IndexError(f"sample {index} has frame groups 0..{layout.frame_groups - 1}, not {group}")
        v = self._vision
        side = v.spatial_merge_size * v.patch_size
        generator = torch.Generator().manual_seed(_seed(self._token_seed, index, group))
        frames = torch.randn(
            v.temporal_patch_size, v.in_channels, layout.grid_rows * side, layout.grid_cols * side, generator=generator
        )
        return patchify_frames(frames, v.spatial_merge_size, v.patch_size)

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self):
            raise IndexError(f"sample index {index} is outside 0..{len(self) - 1}")


def build_video_dataset(config: RunConfig) -> VideoCaptionDataset:
    """The run's video-caption dataset: exactly the samples of all its steps."""
    if config.vision is None or config.video_data is None:
        raise ValueError(f"{config.source}: a video-caption dataset needs the vision section")
    return VideoCaptionDataset(
        config.data,
        config.video_data,
        config.vision,
        num_samples=config.training.train_iters * config.training.global_batch_size,
        seq_length=config.model.seq_length,
        vocab_size=config.model.vocab_size,
        token_seed=config.training.seed,
    )
