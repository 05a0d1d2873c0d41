"""VLM run configuration: the shipped YAML parses; bad vision keys are named in the error."""
from __future__ import annotations

import copy

import pytest

from mindspeed_mm.core.fcp.sandbox.run_config import ConfigError, load_run_config, parse_run_config

BASE = {
    "gpt_args": {
        "global_batch_size": 4,
        "train_iters": 2,
        "seq_length": 64,
        "num_layers": 1,
        "hidden_size": 32,
        "ffn_hidden_size": 64,
        "num_attention_heads": 2,
        "num_query_groups": 1,
        "vocab_size": 100,
        "fcp_preset": "cpu-tiny",
    },
    "vision": {"num_layers": 1, "hidden_size": 16, "ffn_hidden_size": 32, "num_attention_heads": 2},
    "data": {"dataset": "openvid"},
}


def _with(section: str, **values: object) -> dict:
    data = copy.deepcopy(BASE)
    data[section].update(values)
    return data


def test_the_shipped_vlm_config_loads() -> None:
    shipped = load_run_config("tiny_qwen3vl_fcp")
    assert shipped.is_vlm and shipped.is_fcp
    assert shipped.vision is not None and shipped.vision.temporal_patch_size == 2
    assert shipped.vision.spatial_merge_size == 2 and shipped.vision.patch_dim == 3 * 2 * 2 * 2


def test_text_only_configs_have_no_vision() -> None:
    config = load_run_config("tiny_qwen3_fcp")
    assert not config.is_vlm and config.vision is None and config.video_data is None


def test_vision_defaults_and_derived_mrope_sections() -> None:
    config = parse_run_config(BASE)
    assert config.vision is not None and config.video_data is not None
    assert config.video_data.frame_scale == 4.0 and config.video_data.prompt_tokens == 3
    # decoder head 16 -> 8 frequencies, split in Qwen3-VL's 24:20:20 proportion
    assert config.vision.mrope_sections(config.model.head_dim) == (4, 2, 2)
    explicit = parse_run_config(
        _with("vision", mrope_temporal_section=3, mrope_height_section=3, mrope_width_section=2)
    )
    assert explicit.vision is not None and explicit.vision.mrope_sections(16) == (3, 3, 2)


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("vision", {"patch_sise": 2}, r"vision\.patch_sise is not a known option"),
        ("vision", {"num_layers": "two"}, r"vision\.num_layers must be an integer"),
        ("vision", {"temporal_patch_size": 0}, r"vision\.temporal_patch_size must be positive"),
        ("vision", {"frame_scale": -1}, r"vision\.frame_scale must be positive"),
        ("vision", {"prompt_tokens": -1}, r"vision\.prompt_tokens must be >= 0"),
        ("vision", {"hidden_size": 17}, r"vision\.hidden_size=17 is not divisible by num_attention_heads=2"),
        ("vision", {"hidden_size": 12}, r"vision head dimension 6 must be a multiple of 4"),
        ("vision", {"mrope_temporal_section": 4}, r"set all of mrope_temporal_section"),
        (
            "vision",
            {"mrope_temporal_section": 4, "mrope_height_section": 4, "mrope_width_section": 4},
            r"must sum to half the decoder head dimension \(8\)",
        ),
        (
            "vision",
            {"mrope_temporal_section": 2, "mrope_height_section": 5, "mrope_width_section": 1},
            r"cannot be interleaved",
        ),
        ("data", {"length_scale": 64}, r"data\.length_scale applies to the text-only dataset"),
    ],
)
def test_bad_vision_options_are_named(section: str, values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_run_config(_with(section, **values))


def test_empty_vision_section_is_an_error_not_a_text_run() -> None:
    data = copy.deepcopy(BASE)
    data["vision"] = None
    with pytest.raises(ConfigError, match=r"vision\.num_layers is required"):
        parse_run_config(data)
