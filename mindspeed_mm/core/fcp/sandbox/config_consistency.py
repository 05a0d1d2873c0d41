"""Value checks of a parsed run configuration that go beyond one key's type (ranges, divisibility, vision shape)."""
from __future__ import annotations

from mindspeed_mm.core.fcp.sandbox.config_sections import (
    ConfigError, ModelConfig, RunConfig, VideoDataConfig, VisionConfig,
)
from mindspeed_mm.core.fcp.sandbox.vision.mrope_sections import interleaved_mrope_axes
from mindspeed_mm.core.fcp.simulate.workloads import DATASETS


def check_consistency(config: RunConfig) -> None:
    """Raise ConfigError naming the file, section and key of the first value out of range or inconsistent."""
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
