"""Typed run configuration read from a MindSpeed-MM-style YAML file.

The file has two sections, plus an optional third. `gpt_args:` holds Megatron-style keys (model
shape, batch sizes, optimizer, `context_parallel_algo`, `context_parallel_size`) and the `fcp_*`
keys of FCP; `data:` describes the synthetic dataset. `vision:` turns the run into a vision-language
model (a video encoder in front of the decoder) trained on synthetic video-caption samples; it holds
the encoder's shape and how the video metadata is scaled down. Every key is checked: an unknown
key, a missing required key or a value of the wrong type raises `ConfigError` naming the file, the
section and the key.
"""
from __future__ import annotations

import dataclasses
import importlib.resources
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from mindspeed_mm.core.fcp.executor.vision.mrope_sections import interleaved_mrope_axes
from mindspeed_mm.core.fcp.simulate.workloads import DATASETS
from mindspeed_mm_fcp.options import OPTIONS_BY_DEST, FCPOptionError, coerce_option

CP_ALGOS = ("fcp_cp_algo", "megatron_cp_algo")
"""Values of `context_parallel_algo`: FCP, or Megatron's static ring context parallelism."""

_REQUIRED = dataclasses.MISSING
DEFAULT_COMM_TIMEOUT_S = OPTIONS_BY_DEST["fcp_comm_timeout_s"].default
"""Default of `fcp_comm_timeout_s`: far below torch's 30 minutes, far above any healthy exchange of a step."""


class ConfigError(ValueError):
    """A run configuration is malformed; the message names the file, section and key."""


def _key(name: str, default: Any = _REQUIRED) -> Any:
    """A dataclass field read from the YAML key `name`."""
    if default is _REQUIRED:
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


def _fcp_key(dest: str) -> Any:
    """A field for the FCP option `dest`: its YAML key, default and checks come from the one option table."""
    return field(default=OPTIONS_BY_DEST[dest].default, metadata={"key": dest, "fcp_option": True})


@dataclass(frozen=True)
class FCPConfig:
    """Options of the FCP planner and executor (`fcp_*` keys; defaults and checks: `mindspeed_mm_fcp.options`)."""

    preset: str | None = _fcp_key("fcp_preset")
    """Name of an analytic cost-model preset; exactly one of `preset` and `profile_table` is set."""
    profile_table: str | None = _fcp_key("fcp_profile_table")
    """Path of a profiled cost table (JSON) measured by `fcp profile`."""
    max_degree: int | None = _fcp_key("fcp_max_degree")
    """Largest CP group; None means all FCP ranks."""
    max_tokens_per_rank: int | None = _fcp_key("fcp_max_tokens_per_rank")
    """Override of the cost model's memory capacity in tokens per rank."""
    attention_algo: Literal["auto", "ring", "ulysses"] = _fcp_key("fcp_attention_algo")
    """`auto` lets the planner pick ring or ulysses per group; otherwise that algorithm only."""
    async_planning: bool = _fcp_key("fcp_async_planning")
    """Plan step t+1 in a background thread while step t runs."""
    group_pool: Literal["lazy", "prewarm"] = _fcp_key("fcp_group_pool")
    """`lazy`: create a group before the first step whose plan uses it; `prewarm`: all contiguous groups at start."""
    ranks_per_node: int | None = _fcp_key("fcp_ranks_per_node")
    """Ranks sharing a node's fast link; None takes the cost model's hardware value."""
    log_plan: bool = _fcp_key("fcp_log_plan")
    """Log each step's plan summary (groups, degrees, predicted vs measured round time)."""
    recalibrate: bool = _fcp_key("fcp_recalibrate")
    """Correct the cost model per degree / algo from the measured group times of earlier steps."""
    recalibration_smoothing: float = _fcp_key("fcp_recalibration_smoothing")
    """Weight of the newest measurement in the smoothed correction factors, in (0, 1]."""
    comm_timeout_s: float = _fcp_key("fcp_comm_timeout_s")
    """Longest wait of any collective or point-to-point exchange, on the world group and every FCP group,
    in seconds: a rank that stalls makes every other rank stop with an error within it."""


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
    fcp: FCPConfig
    """FCP planner/executor settings."""
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


_SECTIONS: dict[str, tuple[type, ...]] = {
    "gpt_args": (ModelConfig, TrainingConfig, OptimizerConfig, FCPConfig),
    "data": (DataConfig,),
    "vision": (VisionConfig, VideoDataConfig),
}
_OPTIONAL_SECTIONS = ("vision",)
# Keys of `data:` that describe the text-only length generator; the video-caption dataset scales its
# samples with the `vision:` keys instead, so setting these in a vision run is an error.
_TEXT_ONLY_DATA_KEYS = ("length_scale", "min_length", "loss_free_prefix")


def embedded_config_names() -> list[str]:
    """Names of the configurations shipped in the package (`configs/*.yaml`)."""
    folder = importlib.resources.files("mindspeed_mm.core.fcp") / "configs"
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A YAML path as given, or the shipped configuration of that name (with or without `.yaml`)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    name = path.name if path.suffix == ".yaml" else f"{path.name}.yaml"
    if path.parent == Path(".") and name in embedded_config_names():
        return Path(str(importlib.resources.files("mindspeed_mm.core.fcp") / "configs" / name))
    raise ConfigError(
        f"{name_or_path}: no such file, and not a shipped configuration ({', '.join(embedded_config_names())})"
    )


def load_run_config(path: str | Path) -> RunConfig:
    """Reads and validates a run configuration YAML file (or a shipped configuration by name)."""
    file = resolve_config_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{file}: cannot read configuration ({err.strerror or err})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{file}: invalid YAML ({err})") from None
    return parse_run_config(data, source=str(file))


def parse_run_config(data: Any, source: str = "<mapping>") -> RunConfig:
    """Validates a configuration mapping ({'gpt_args': {...}, 'data': {...}})."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: top level must be a mapping with sections {', '.join(_SECTIONS)}")
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{source}: unknown section {unknown[0]!r}; expected {', '.join(_SECTIONS)}")
    if "gpt_args" not in data:
        raise ConfigError(f"{source}: missing section 'gpt_args'")
    parsed: dict[type, Any] = {}
    for section, classes in _SECTIONS.items():
        if section in _OPTIONAL_SECTIONS and section not in data:
            continue
        values = data.get(section) or {}
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: section {section!r} must be a mapping, got {type(values).__name__}")
        known = {f.metadata["key"] for cls in classes for f in dataclasses.fields(cls)}
        for key in values:
            if key not in known:
                raise ConfigError(f"{source}: {section}.{key} is not a known option")
        for cls in classes:
            parsed[cls] = _build(cls, values, f"{source}: {section}")
    config = RunConfig(
        model=parsed[ModelConfig],
        training=parsed[TrainingConfig],
        optimizer=parsed[OptimizerConfig],
        fcp=parsed[FCPConfig],
        data=parsed[DataConfig],
        vision=parsed.get(VisionConfig),
        video_data=parsed.get(VideoDataConfig),
        source=source,
    )
    if config.is_vlm:
        for key in _TEXT_ONLY_DATA_KEYS:
            if key in (data.get("data") or {}):
                raise ConfigError(
                    f"{source}: data.{key} applies to the text-only dataset; a run with a vision section scales "
                    "its video-caption samples with vision.frame_scale, grid_scale, text_scale and min_caption_tokens"
                )
    _check_consistency(config)
    return config


def _build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f.metadata["key"]
        if key in values:
            kwargs[f.name] = _coerce(values[key], hints[f.name], f"{where}.{key}")
            if f.metadata.get("fcp_option") and kwargs[f.name] is not None:
                try:  # the same value checks as the --fcp-* flag
                    kwargs[f.name] = coerce_option(key, kwargs[f.name])
                except FCPOptionError as err:
                    raise ConfigError(f"{where}.{key}: {str(err).split(': ', 1)[1]}") from None
        elif f.default is _REQUIRED:
            raise ConfigError(f"{where}.{key} is required")
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type hint `hint`; ints are accepted for floats."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _coerce(value, inner, where)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(f"{where} must be one of {', '.join(map(str, choices))}, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported option type {hint!r} for {where}")


def _check_consistency(config: RunConfig) -> None:
    where = f"{config.source}: gpt_args"
    m, t, o, f, d = config.model, config.training, config.optimizer, config.fcp, config.data
    positive = {
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "ffn_hidden_size": m.ffn_hidden_size,
        "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.num_query_groups,
        "vocab_size": m.vocab_size,
        "seq_length": m.seq_length,
        "rotary_base": m.rotary_base,
        "train_iters": t.train_iters,
        "global_batch_size": t.global_batch_size,
        "context_parallel_size": t.context_parallel_size,
        "micro_batch_size": t.micro_batch_size,
        "log_interval": t.log_interval,
    }
    optional_positive = {
        "kv_channels": m.kv_channels,
    }
    for key, value in {**positive, **optional_positive}.items():
        if value is not None and value <= 0:
            raise ConfigError(f"{where}.{key} must be positive, got {value}")
    for key, value in {"lr": o.lr, "norm_epsilon": m.norm_epsilon, "init_method_std": m.init_method_std}.items():
        if value <= 0:
            raise ConfigError(f"{where}.{key} must be positive, got {value}")
    if t.micro_batch_size != 1:
        raise ConfigError(
            f"{where}.micro_batch_size must be 1 (each round packs its samples into one sequence per group), "
            f"got {t.micro_batch_size}"
        )
    if m.num_attention_heads % m.num_query_groups:
        raise ConfigError(
            f"{where}.num_query_groups={m.num_query_groups} must divide num_attention_heads={m.num_attention_heads}"
        )
    if m.kv_channels is None and m.hidden_size % m.num_attention_heads:
        raise ConfigError(
            f"{where}.hidden_size={m.hidden_size} is not divisible by num_attention_heads={m.num_attention_heads}; "
            "set kv_channels"
        )
    if m.head_dim % 2:
        raise ConfigError(f"{where}: head dimension {m.head_dim} must be even for RoPE")
    if (f.preset is None) == (f.profile_table is None):
        raise ConfigError(f"{where}: set exactly one of fcp_preset and fcp_profile_table")
    data_where = f"{config.source}: data"
    if d.dataset not in DATASETS:
        raise ConfigError(f"{data_where}.dataset must be one of {', '.join(DATASETS)}, got {d.dataset!r}")
    if d.length_scale <= 0:
        raise ConfigError(f"{data_where}.length_scale must be positive, got {d.length_scale}")
    if d.min_length < 2:
        raise ConfigError(f"{data_where}.min_length must be at least 2 (one input and one label), got {d.min_length}")
    if d.min_length > m.seq_length:
        raise ConfigError(f"{data_where}.min_length={d.min_length} exceeds gpt_args.seq_length={m.seq_length}")
    if not 0.0 <= d.loss_free_prefix < 1.0:
        raise ConfigError(f"{data_where}.loss_free_prefix must be in [0, 1), got {d.loss_free_prefix}")
    if config.vision is not None and config.video_data is not None:
        _check_vision(config.vision, config.video_data, m, f"{config.source}: vision")


def _check_vision(v: VisionConfig, video: VideoDataConfig, m: ModelConfig, where: str) -> None:
    positive = {
        "num_layers": v.num_layers,
        "hidden_size": v.hidden_size,
        "ffn_hidden_size": v.ffn_hidden_size,
        "num_attention_heads": v.num_attention_heads,
        "patch_size": v.patch_size,
        "temporal_patch_size": v.temporal_patch_size,
        "spatial_merge_size": v.spatial_merge_size,
        "in_channels": v.in_channels,
        "min_caption_tokens": video.min_caption_tokens,
        "norm_epsilon": v.norm_epsilon,
        "frame_scale": video.frame_scale,
        "grid_scale": video.grid_scale,
        "text_scale": video.text_scale,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{where}.{key} must be positive, got {value}")
    if video.prompt_tokens < 0:
        raise ConfigError(f"{where}.prompt_tokens must be >= 0, got {video.prompt_tokens}")
    if v.hidden_size % v.num_attention_heads:
        raise ConfigError(
            f"{where}.hidden_size={v.hidden_size} is not divisible by num_attention_heads={v.num_attention_heads}"
        )
    if v.head_dim % 4:
        raise ConfigError(
            f"{where}: vision head dimension {v.head_dim} must be a multiple of 4 (2D rotary: half rows, half columns)"
        )
    section_keys = ("mrope_temporal_section", "mrope_height_section", "mrope_width_section")
    given = [getattr(v, key) for key in section_keys]
    if any(value is None for value in given) and any(value is not None for value in given):
        raise ConfigError(f"{where}: set all of {', '.join(section_keys)} or none of them")
    sections = v.mrope_sections(m.head_dim)
    if sum(sections) != m.head_dim // 2:
        raise ConfigError(
            f"{where}: mRoPE sections (temporal, height, width) = {sections} must sum to half the decoder head "
            f"dimension ({m.head_dim // 2})"
        )
    try:
        interleaved_mrope_axes(sections)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
