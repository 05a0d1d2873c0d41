"""Typed run configuration read from a MindSpeed-MM-style YAML file.

The file has two sections, plus an optional third. `gpt_args:` holds Megatron-style keys (model
shape, batch sizes, optimizer, `context_parallel_algo`, `context_parallel_size`) and the `fcp_*`
keys of FCP; `data:` describes the synthetic dataset. `vision:` turns the run into a vision-language
model (a video encoder in front of the decoder) trained on synthetic video-caption samples; it holds
the encoder's shape and how the video metadata is scaled down. Every key is checked: an unknown
key, a missing required key or a value of the wrong type raises `ConfigError` naming the file, the
section and the key.

The section classes live in `config_sections` and the value checks in `config_consistency`; this
module reads and type-checks the YAML (all their public names import from here).
"""
from __future__ import annotations

import dataclasses
import importlib.resources
import types
import typing
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from mindspeed_mm.core.fcp.sandbox.config_consistency import check_consistency
from mindspeed_mm.core.fcp.sandbox.config_sections import (
    CP_ALGOS, DEFAULT_COMM_TIMEOUT_S, REQUIRED, ConfigError, DataConfig, FCPOptions, ModelConfig, OptimizerConfig,
    RunConfig, TrainingConfig, VideoDataConfig, VisionConfig,
)
from mindspeed_mm_fcp.options import FCPOptionError, coerce_option

__all__ = ["CP_ALGOS", "DEFAULT_COMM_TIMEOUT_S", "ConfigError", "DataConfig", "FCPOptions", "ModelConfig",
           "OptimizerConfig", "RunConfig", "TrainingConfig", "VideoDataConfig", "VisionConfig",
           "embedded_config_names", "load_run_config", "parse_run_config", "resolve_config_path"]


_SECTIONS: dict[str, tuple[type, ...]] = {
    "gpt_args": (ModelConfig, TrainingConfig, OptimizerConfig, FCPOptions),
    "data": (DataConfig,),
    "vision": (VisionConfig, VideoDataConfig),
}
_OPTIONAL_SECTIONS = ("vision",)
# Keys of `data:` that describe the text-only length generator; the video-caption dataset scales its
# samples with the `vision:` keys instead, so setting these in a vision run is an error.
_TEXT_ONLY_DATA_KEYS = ("length_scale", "min_length", "loss_free_prefix")


def embedded_config_names() -> list[str]:
    """Names of the configurations shipped in the package (`configs/*.yaml`)."""
    folder = importlib.resources.files("mindspeed_mm.core.fcp.sandbox") / "configs"
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A YAML path as given, or the shipped configuration of that name (with or without `.yaml`)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    name = path.name if path.suffix == ".yaml" else f"{path.name}.yaml"
    if path.parent == Path(".") and name in embedded_config_names():
        return Path(str(importlib.resources.files("mindspeed_mm.core.fcp.sandbox") / "configs" / name))
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
        fcp=parsed[FCPOptions],
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
    check_consistency(config)
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
        elif f.default is REQUIRED:
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
