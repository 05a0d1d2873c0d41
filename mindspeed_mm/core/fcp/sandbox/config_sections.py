"""Typed sections of a run configuration: one frozen dataclass per group of YAML keys, and `RunConfig`.

Each field names its YAML key in its metadata (`key`); a field without a default is a required key.
Reading and checking a YAML file into these classes: `mindspeed_mm.core.fcp.sandbox.run_config`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from mindspeed_mm.core.fcp.runtime.batch_planner import BatchPlanner
from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions
from mindspeed_mm.core.fcp.solver.plan import INDEPENDENT
from mindspeed_mm_fcp.options import OPTIONS_BY_DEST

CP_ALGOS = ("fcp_cp_algo", "megatron_cp_algo")
"""Values of `context_parallel_algo`: FCP, or Megatron's static ring context parallelism."""

REQUIRED = dataclasses.MISSING
"""Default of a field whose YAML key is required."""
DEFAULT_COMM_TIMEOUT_S = OPTIONS_BY_DEST["fcp_comm_timeout_s"].default
"""Default of `fcp_comm_timeout_s`: far below torch's 30 minutes, far above any healthy exchange of a step."""


class ConfigError(ValueError):
    """A run configuration is malformed; the message names the file, section and key."""


def _key(name: str, default: Any = REQUIRED) -> Any:
    """A dataclass field read from the YAML key `name`."""
    if default is REQUIRED:
        return field(metadata={"key": name})
    return field(default=default, metadata={"key": name})


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the Qwen3-style decoder (GQA, QK-norm, SwiGLU, RMSNorm, RoPE)."""

    num_layers: int = _key("num_layers")
    """Transformer layers."""
    hidden_size: int = _key("hidden_size")
    """Model width."""
    ffn_hidden_size: int = _key("ffn_hidden_size")
    """Width of one SwiGLU branch."""
    num_attention_heads: int = _key("num_attention_heads")
    """Query heads."""
    num_query_groups: int = _key("num_query_groups")
    """Key/value heads (grouped-query attention); must divide `num_attention_heads`."""
    vocab_size: int = _key("vocab_size")
    """Vocabulary size."""
    seq_length: int = _key("seq_length")
    """Longest sample in tokens; longer synthetic samples are truncated to it."""
    kv_channels: int | None = _key("kv_channels", None)
    """Head dimension; None means hidden_size / num_attention_heads."""
    rotary_base: int = _key("rotary_base", 10000)
    """RoPE base period."""
    norm_epsilon: float = _key("norm_epsilon", 1e-6)
    """RMSNorm epsilon (also used by the QK norms)."""
    init_method_std: float = _key("init_method_std", 0.02)
    """Standard deviation of the normal weight initialisation."""

    @property
    def head_dim(self) -> int:
        """Channels per attention head."""
        return self.kv_channels if self.kv_channels is not None else self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class TrainingConfig:
    """Batch sizes, step count, parallel algorithm and logging."""

    train_iters: int = _key("train_iters")
    """Optimizer steps to run."""
    global_batch_size: int = _key("global_batch_size")
    """Samples per optimizer step (over all ranks)."""
    context_parallel_algo: Literal["fcp_cp_algo", "megatron_cp_algo"] = _key("context_parallel_algo", "fcp_cp_algo")
    """`fcp_cp_algo`: groups re-planned every step; `megatron_cp_algo`: fixed ring CP groups."""
    context_parallel_size: int = _key("context_parallel_size", 1)
    """Static CP degree of `megatron_cp_algo` (DP = ranks / CP); not used by FCP, whose degrees change per step."""
    micro_batch_size: int = _key("micro_batch_size", 1)
    """Must be 1: a micro-batch (round) is one packed varlen sequence per CP group, as in Megatron's THD format."""
    seed: int = _key("seed", 1234)
    """Seed of the weight initialisation and of the token contents."""
    log_interval: int = _key("log_interval", 1)
    """Log an iteration line every this many steps."""


@dataclass(frozen=True)
class OptimizerConfig:
    """The torch optimizer applied after the once-per-step gradient all-reduce."""

    optimizer: Literal["adam", "sgd"] = _key("optimizer", "adam")
    """`adam` (torch.optim.Adam) or `sgd` (torch.optim.SGD)."""
    lr: float = _key("lr", 1e-3)
    """Learning rate (constant)."""
    weight_decay: float = _key("weight_decay", 0.0)
    """L2 weight decay."""
    adam_beta1: float = _key("adam_beta1", 0.9)
    """Adam first-moment decay."""
    adam_beta2: float = _key("adam_beta2", 0.999)
    """Adam second-moment decay."""
    adam_eps: float = _key("adam_eps", 1e-8)
    """Adam denominator epsilon."""
    sgd_momentum: float = _key("sgd_momentum", 0.0)
    """SGD momentum."""


@dataclass(frozen=True)
class DataConfig:
    """The embedded synthetic dataset: lengths from a workload generator, scaled down for CPU."""

    dataset: str = _key("dataset", "openvid")
    """Length generator: one of the names in `simulate.workloads.DATASETS`."""
    length_scale: float = _key("length_scale", 256.0)
    """Generated token lengths are divided by this factor (rounded up)."""
    min_length: int = _key("min_length", 8)
    """Scaled lengths are raised to at least this many tokens."""
    seed: int = _key("seed", 0)
    """Seed of the length generator."""
    loss_free_prefix: float = _key("loss_free_prefix", 0.5)
    """Up to this fraction of each sample (a prompt-like prefix) carries no loss."""


@dataclass(frozen=True)
class VisionConfig:
    """Vision encoder of the VLM (`vision:` section): patch embedding, ViT blocks, 2x2 merger, mRoPE split."""

    num_layers: int = _key("num_layers")
    """Vision transformer blocks."""
    hidden_size: int = _key("hidden_size")
    """Vision transformer width."""
    ffn_hidden_size: int = _key("ffn_hidden_size")
    """Width of the vision MLP (GELU)."""
    num_attention_heads: int = _key("num_attention_heads")
    """Vision attention heads."""
    patch_size: int = _key("patch_size", 2)
    """Side of a square patch, in pixels."""
    temporal_patch_size: int = _key("temporal_patch_size", 2)
    """Consecutive frames folded into one patch (one frame group)."""
    spatial_merge_size: int = _key("spatial_merge_size", 2)
    """Patches merged per side into one LLM token."""
    in_channels: int = _key("in_channels", 3)
    """Colour channels of a frame."""
    norm_epsilon: float = _key("norm_epsilon", 1e-6)
    """LayerNorm epsilon of the vision blocks."""
    mrope_temporal_section: int | None = _key("mrope_temporal_section", None)
    """Rotary frequencies of the decoder's head that take the temporal position; None derives all three
    sections from the decoder head in Qwen3-VL's 24:20:20 proportion."""
    mrope_height_section: int | None = _key("mrope_height_section", None)
    """Rotary frequencies that take the height position (set all three sections or none)."""
    mrope_width_section: int | None = _key("mrope_width_section", None)
    """Rotary frequencies that take the width position (set all three sections or none)."""

    @property
    def head_dim(self) -> int:
        """Channels per vision attention head."""
        return self.hidden_size // self.num_attention_heads

    @property
    def patch_dim(self) -> int:
        """Pixel values in one patch: channels x temporal patch x patch side^2."""
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def patches_per_token(self) -> int:
        """Patches merged into one LLM token."""
        return self.spatial_merge_size * self.spatial_merge_size

    def mrope_sections(self, decoder_head_dim: int) -> tuple[int, int, int]:
        """(temporal, height, width) rotary frequency counts of a decoder head; they sum to head_dim / 2."""
        t, h, w = self.mrope_temporal_section, self.mrope_height_section, self.mrope_width_section
        if t is not None and h is not None and w is not None:
            return (t, h, w)
        frequencies = decoder_head_dim // 2
        spatial = frequencies * 20 // 64
        return (frequencies - 2 * spatial, spatial, spatial)


@dataclass(frozen=True)
class VideoDataConfig:
    """How the synthetic video-caption samples scale a workload generator's clips down (`vision:` section)."""

    frame_scale: float = _key("frame_scale", 4.0)
    """Frame groups (2 sampled frames each) of a generated clip are divided by this (rounded up, at least 1)."""
    grid_scale: float = _key("grid_scale", 8.0)
    """Merged-token rows and columns of a frame are each divided by this (rounded up, at least 1)."""
    text_scale: float = _key("text_scale", 16.0)
    """Caption tokens are divided by this (rounded up)."""
    min_caption_tokens: int = _key("min_caption_tokens", 2)
    """Scaled captions are raised to at least this many tokens (they carry the loss)."""
    prompt_tokens: int = _key("prompt_tokens", 3)
    """Loss-free text tokens before the video (chat template and vision-start marker)."""


@dataclass(frozen=True)
class RunConfig:
    """Everything one `fcp train` run needs."""

    model: ModelConfig
    """Decoder shape."""
    training: TrainingConfig
    """Steps, batch sizes, parallel algorithm."""
    optimizer: OptimizerConfig
    """Optimizer settings."""
    fcp: FCPOptions
    """FCP options (`fcp_*` keys of `gpt_args`)."""
    data: DataConfig
    """Synthetic dataset settings."""
    vision: VisionConfig | None = None
    """Vision encoder of a vision-language run; None trains the text-only decoder."""
    video_data: VideoDataConfig | None = None
    """Scaling of the synthetic video-caption samples; set exactly when `vision` is."""
    source: str = "<mapping>"
    """Where the configuration was read from (for messages)."""

    @property
    def is_vlm(self) -> bool:
        """True when a vision encoder runs in front of the decoder."""
        return self.vision is not None

    @property
    def is_fcp(self) -> bool:
        """True when training with FCP, False for the static `megatron_cp_algo` baseline."""
        return self.training.context_parallel_algo == "fcp_cp_algo"

    def batch_planner(self, num_ranks: int) -> BatchPlanner:
        """The planner of this run on `num_ranks` FCP ranks: FCP, or Megatron's static ring CP of
        `context_parallel_size`. `fcp train` all-reduces the gradients once per step, so each group waits only
        for its own members and an idle rank moves on: plans are made for that (independent rounds)."""
        self.validate_world(num_ranks)
        return self.fcp.batch_planner(num_ranks=num_ranks, step_semantics=INDEPENDENT,
                                      static_cp_degree=None if self.is_fcp else self.training.context_parallel_size)

    def validate_world(self, world_size: int) -> None:
        """Checks the options that depend on the number of FCP ranks."""
        t = self.training
        where = f"{self.source}: gpt_args"
        if self.fcp.max_degree is not None and self.fcp.max_degree > world_size:
            raise ConfigError(f"{where}.fcp_max_degree={self.fcp.max_degree} exceeds the {world_size} ranks")
        if not self.is_fcp and world_size % t.context_parallel_size:
            raise ConfigError(
                f"{where}.context_parallel_size={t.context_parallel_size} does not divide the {world_size} ranks"
            )
