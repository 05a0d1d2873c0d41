"""Run configuration: the shipped YAMLs parse; bad keys, types and values are named in the error."""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from mindspeed_mm.core.fcp.sandbox.run_config import (
    ConfigError,
    embedded_config_names,
    load_run_config,
    parse_run_config,
    resolve_config_path,
)

BASE = {
    "gpt_args": {
        "context_parallel_algo": "fcp_cp_algo",
        "global_batch_size": 8,
        "train_iters": 3,
        "seq_length": 64,
        "num_layers": 1,
        "hidden_size": 32,
        "ffn_hidden_size": 64,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "vocab_size": 100,
        "fcp_preset": "cpu-tiny",
    },
    "data": {"dataset": "msrvtt", "length_scale": 100},
}


def _with(section: str, **values: object) -> dict:
    data = copy.deepcopy(BASE)
    data[section].update(values)
    return data


def test_shipped_configs_parse() -> None:
    names = embedded_config_names()
    assert {"tiny_qwen3_fcp.yaml", "tiny_qwen3_static.yaml"} <= set(names)
    fcp = load_run_config("tiny_qwen3_fcp")
    static = load_run_config("tiny_qwen3_static.yaml")
    assert fcp.is_fcp and not static.is_fcp
    assert fcp.model == static.model and fcp.data == static.data
    assert fcp.model.head_dim == 16


def test_values_and_defaults_are_typed() -> None:
    config = parse_run_config(_with("gpt_args", lr=1, fcp_max_degree=None, fcp_async_planning=False))
    assert config.optimizer.lr == 1.0 and isinstance(config.optimizer.lr, float)
    assert config.fcp.max_degree is None and config.fcp.async_planning is False
    assert config.training.seed == 1234 and config.fcp.attention_algo == "auto"
    assert config.data.dataset == "msrvtt" and config.data.length_scale == 100.0


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("gpt_args", {"fcp_max_degre": 4}, "gpt_args.fcp_max_degre is not a known option"),
        ("gpt_args", {"global_batch_size": "8"}, "gpt_args.global_batch_size must be an integer"),
        ("gpt_args", {"train_iters": 2.5}, "gpt_args.train_iters must be an integer"),
        ("gpt_args", {"fcp_async_planning": "yes"}, "gpt_args.fcp_async_planning must be true or false"),
        ("gpt_args", {"num_layers": True}, "gpt_args.num_layers must be an integer"),
        ("gpt_args", {"context_parallel_algo": "ring"}, "gpt_args.context_parallel_algo must be one of"),
        ("gpt_args", {"fcp_attention_algo": "hybrid"}, "gpt_args.fcp_attention_algo: choose one of auto, ring, ulysses"),
        ("gpt_args", {"fcp_max_tokens_per_rank": 0}, "gpt_args.fcp_max_tokens_per_rank: must be a positive integer, got 0"),
        ("gpt_args", {"num_query_groups": 3}, "num_query_groups=3 must divide num_attention_heads=4"),
        ("gpt_args", {"micro_batch_size": 2}, "gpt_args.micro_batch_size must be 1"),
        ("gpt_args", {"fcp_profile_table": "t.json"}, "exactly one of fcp_preset and fcp_profile_table"),
        ("data", {"dataset": "webvid"}, "data.dataset must be one of"),
        ("data", {"min_length": 100}, "data.min_length=100 exceeds gpt_args.seq_length=64"),
        ("data", {"loss_free_prefix": 1.0}, "data.loss_free_prefix must be in [0, 1)"),
        ("data", {"shuffle": True}, "data.shuffle is not a known option"),
    ],
)
def test_bad_option_is_named(section: str, values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_run_config(_with(section, **values), source="run.yaml")


def test_missing_required_key_and_section() -> None:
    data = copy.deepcopy(BASE)
    del data["gpt_args"]["hidden_size"]
    with pytest.raises(ConfigError, match=r"gpt_args.hidden_size is required"):
        parse_run_config(data)
    with pytest.raises(ConfigError, match="missing section 'gpt_args'"):
        parse_run_config({"data": {}})
    with pytest.raises(ConfigError, match="unknown section 'model'"):
        parse_run_config({**BASE, "model": {}})


def test_world_dependent_checks() -> None:
    static = parse_run_config(_with("gpt_args", context_parallel_algo="megatron_cp_algo", context_parallel_size=4))
    static.validate_world(8)
    with pytest.raises(ConfigError, match="context_parallel_size=4 does not divide the 6 ranks"):
        static.validate_world(6)
    capped = parse_run_config(_with("gpt_args", fcp_max_degree=8))
    with pytest.raises(ConfigError, match="fcp_max_degree=8 exceeds the 4 ranks"):
        capped.validate_world(4)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("gpt_args: [unclosed", encoding="utf-8")
    with pytest.raises(ConfigError, match="broken.yaml: invalid YAML"):
        load_run_config(broken)
    with pytest.raises(ConfigError, match="no such file, and not a shipped configuration"):
        resolve_config_path(tmp_path / "missing.yaml")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(_with("gpt_args", vocab_size="many")), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"good.yaml: gpt_args.vocab_size must be an integer, got 'many'"):
        load_run_config(good)


def test_fcp_keys_take_defaults_and_checks_from_the_one_option_table():
    from mindspeed_mm.core.fcp.sandbox.run_config import FCPOptions
    from mindspeed_mm_fcp.options import FCP_OPTIONS

    fields = {f.metadata["key"]: f.default for f in dataclasses.fields(FCPOptions)}
    assert fields == {option.dest: option.default for option in FCP_OPTIONS}
    with pytest.raises(ConfigError, match=r"gpt_args.fcp_recalibration_smoothing: expected a number in \(0, 1\]"):
        parse_run_config(_with("gpt_args", fcp_recalibration_smoothing=1.5))
