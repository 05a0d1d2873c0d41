"""Token layout of a video-caption sample and its 3D mRoPE position ids, computed from metadata alone.

A sample is `prompt | video | caption` in the LLM sequence. The video is `frame_groups` frame groups
(`temporal_patch_size` frames each); a frame group is a grid of `grid_rows x grid_cols` merged
tokens, each made of `merge x merge` patches. Vision tokens are laid out group by group, row by row.

Position ids follow Qwen-VL's mRoPE: a text token at position p gets (p, p, p); the vision token of
frame group g, row r, column c gets (s + g, s + r, s + c) with s the position after the prompt; the
caption continues from the largest vision id + 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class VideoSampleLayout:
    """Where the text and vision tokens of one sample sit, and how many patches its video has."""

    prompt_tokens: int
    """Loss-free text tokens before the video."""
    frame_groups: int
    """Frame groups of the video (the vision encoder's attention windows)."""
    grid_rows: int
    """Merged-token rows of a frame group."""
    grid_cols: int
    """Merged-token columns of a frame group."""
    caption_tokens: int
    """Caption tokens after the video."""
    spatial_merge_size: int
    """Patches merged per side into one LLM token."""

    def __post_init__(self) -> None:
        for name in ("frame_groups", "grid_rows", "grid_cols", "caption_tokens", "spatial_merge_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be >= 0, got {self.prompt_tokens}")

    @property
    def tokens_per_group(self) -> int:
        """Merged vision tokens of one frame group."""
        return self.grid_rows * self.grid_cols

    @property
    def patches_per_group(self) -> int:
        """Vision-encoder patches of one frame group (its attention window)."""
        return self.tokens_per_group * self.spatial_merge_size * self.spatial_merge_size

    @property
    def vision_tokens(self) -> int:
        """Merged vision tokens of the sample."""
        return self.frame_groups * self.tokens_per_group

    @property
    def vision_patches(self) -> int:
        """Vision-encoder patches of the sample."""
        return self.frame_groups * self.patches_per_group

    @property
    def vision_start(self) -> int:
        """Index of the first vision token in the sample."""
        return self.prompt_tokens

    @property
    def caption_start(self) -> int:
        """Index of the first caption token in the sample."""
        return self.prompt_tokens + self.vision_tokens

    @property
    def length(self) -> int:
        """LLM tokens of the sample."""
        return self.caption_start + self.caption_tokens

    def group_token_start(self, group: int) -> int:
        """Index, in the sample, of frame group `group`'s first vision token."""
        if not 0 <= group < self.frame_groups:
            raise ValueError(f"frame group {group} is outside 0..{self.frame_groups - 1}")
        return self.vision_start + group * self.tokens_per_group


def mrope_position_ids(layout: VideoSampleLayout) -> torch.Tensor:
    """`[length, 3]` int64 (temporal, height, width) position of every token of the sample."""
    prompt = torch.arange(layout.prompt_tokens, dtype=torch.int64).unsqueeze(1).expand(-1, 3)
    groups, rows, cols = torch.meshgrid(
        torch.arange(layout.frame_groups, dtype=torch.int64),
        torch.arange(layout.grid_rows, dtype=torch.int64),
        torch.arange(layout.grid_cols, dtype=torch.int64),
        indexing="ij",
    )
    vision = layout.vision_start + torch.stack([groups.reshape(-1), rows.reshape(-1), cols.reshape(-1)], dim=1)
    caption_from = layout.vision_start + max(layout.frame_groups, layout.grid_rows, layout.grid_cols)
    caption = torch.arange(caption_from, caption_from + layout.caption_tokens, dtype=torch.int64)
    return torch.cat([prompt, vision, caption.unsqueeze(1).expand(-1, 3)])


def patch_grid_positions(grid_rows: int, grid_cols: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column, in the patch grid, of each patch of a frame group in merge-window order.

    Patches are ordered merged token by merged token (row-major), and inside a merged token by its
    `merge x merge` patches (row-major), so `merge^2` consecutive patches form one LLM token.
    """
    rows, cols, sub_rows, sub_cols = torch.meshgrid(
        torch.arange(grid_rows, dtype=torch.int64),
        torch.arange(grid_cols, dtype=torch.int64),
        torch.arange(merge, dtype=torch.int64),
        torch.arange(merge, dtype=torch.int64),
        indexing="ij",
    )
    return (rows * merge + sub_rows).reshape(-1), (cols * merge + sub_cols).reshape(-1)
