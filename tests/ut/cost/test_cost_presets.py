"""Analytic presets: every preset builds, shapes match public figures, options act as documented."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable, build_preset_table, list_presets
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS, SOURCES


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_builds_round_trips_and_fits(name: str) -> None:
    cost = CostModel.from_preset(name)
    table = cost.table
    assert ProfileTable.from_dict(json.loads(json.dumps(table.to_dict()))) == table
    assert cost.capacity_tokens >= 4096, (name, cost.capacity_tokens)
    assert table.provenance["source"] == "analytic preset" and table.provenance["preset"] == name
    assert table.provenance["hardware_sources"] and table.provenance["model_sources"]
    if table.hardware.device != "cpu":   # the CPU preset rests on lscpu and estimates only
        assert table.provenance["sources"], name
    for key, text in table.provenance["sources"].items():
        assert SOURCES[key] == text


def test_qwen3vl_8b_on_a3_capacity_is_in_the_planning_range() -> None:
    cost = CostModel.from_preset("a3-qwen3vl-8b")
    assert 16_000 <= cost.capacity_tokens <= 64_000
    assert cost.ranks_per_node == 16   # one rank per 910C die
    assert cost.table.recompute == "full"


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown preset 'a4-qwen3vl-8b'; valid presets: .*a3-qwen3vl-8b"):
        CostModel.from_preset("a4-qwen3vl-8b")
    with pytest.raises(ValueError, match="unknown preset 'a3-llama'"):
        CostModel.from_preset("a3-llama")
    with pytest.raises(ValueError, match=r"unknown hardware 'tpu'; valid: \['910b', 'a3', 'cpu', 'h100', 'h200'\]"):
        build_preset_table("tpu", "tiny")
    with pytest.raises(ValueError, match="unknown model 'gpt'; valid: .*qwen3vl-8b"):
        build_preset_table("a3", "gpt")


@pytest.mark.parametrize("kwargs, message", [
    ({"dtype": "fp32"}, r"dtype 'fp32' not supported on 'a3'; valid: \['bf16', 'fp16'\]"),
    ({"recompute": "selective"}, r"recompute must be one of \['none', 'full'\], got 'selective'"),
    ({"sharding": "zero9"}, r"sharding must be one of \['none', 'distributed_optimizer', 'fsdp'\]"),
    ({"tp": 3}, "tp=3 must divide the heads"),
    ({"tp": 0}, "tp must be a positive int, got 0"),
    ({"pp": 5}, r"pp=5 must divide the layers \(36\)"),
    ({"shard_ranks": 0}, "shard_ranks must be a positive int, got 0"),
    ({"ranks_per_node": -2}, "ranks_per_node must be a positive int, got -2"),
])
def test_bad_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_preset_table("a3", "qwen3vl-8b", **kwargs)


@pytest.mark.parametrize("model, billions", [
    ("qwen3vl-2b", 1.72), ("qwen3vl-4b", 4.02), ("qwen3vl-8b", 8.19),
])
def test_llm_parameter_counts_match_public_sizes(model: str, billions: float) -> None:
    dec = MODELS[model].decoder
    params = dec.layers * dec.layer_params() + dec.embedding_params() + dec.head_params()
    assert params / 1e9 == pytest.approx(billions, rel=0.01)


@pytest.mark.parametrize("model, billions", [("qwen3vl-2b", 0.30), ("qwen3vl-8b", 0.41)])
def test_vision_block_parameters_match_public_sizes(model: str, billions: float) -> None:
    enc = MODELS[model].encoder
    assert enc is not None
    assert enc.depth * enc.block_matmul_params() / 1e9 == pytest.approx(billions, rel=0.03)


def test_activation_bytes_per_layer_of_qwen3vl_8b() -> None:
    # 8h + 4 heads hd + 4 kv hd + 6 ffn = 126,976 bytes per token and layer (16-bit).
    assert MODELS["qwen3vl-8b"].decoder.layer_activation_bytes() == 126_976


def test_attention_grid_has_the_causal_mask_efficiency() -> None:
    table = build_preset_table("h100", "qwen3vl-8b")
    causal, full = table.time.attention_causal_ms, table.time.attention_full_ms
    long_ratio = causal.y[-1] / full.y[-1]
    short_ratio = causal.y[0] / full.y[0]
    assert 0.5 <= long_ratio < 0.52
    assert short_ratio > long_ratio   # fixed costs dominate short documents
    ys = np.asarray(causal.y)
    assert ys[-1] / ys[-2] == pytest.approx(4.0, rel=0.01)   # quadratic at long lengths


def test_link_grids_follow_the_documented_bandwidths() -> None:
    table = build_preset_table("a3", "qwen3vl-8b")
    hw = HARDWARE["a3"]
    gigabyte = 1e9
    expected = hw.p2p_latency_ms + 1e3 * gigabyte / (hw.p2p_intra_bytes_per_s * hw.p2p_efficiency)
    assert table.time.p2p_intra_ms(gigabyte) == pytest.approx(expected)
    assert table.time.p2p_inter_ms(gigabyte) > 5 * table.time.p2p_intra_ms(gigabyte)


def test_tensor_and_pipeline_parallel_shrink_the_rank_share() -> None:
    base = build_preset_table("a3", "qwen3vl-8b")
    tp2 = build_preset_table("a3", "qwen3vl-8b", tp=2)
    pp2 = build_preset_table("a3", "qwen3vl-8b", pp=2)
    assert tp2.memory.static_bytes == pytest.approx(base.memory.static_bytes / 2)
    assert tp2.time.linear_ms_per_token < base.time.linear_ms_per_token
    assert tp2.memory.activation_bytes_per_token < base.memory.activation_bytes_per_token
    assert pp2.layers_per_stage == 18 and pp2.time.launch_ms == pytest.approx(base.time.launch_ms / 2)
    assert pp2.memory.static_bytes < base.memory.static_bytes
    work = [30000]
    assert CostModel(pp2).group_time_ms(CostModel(pp2).workload(work), 1, "ring") < \
        CostModel(base).group_time_ms(CostModel(base).workload(work), 1, "ring")


def test_state_sharding_options() -> None:
    def static(**kw: object) -> float:
        return build_preset_table("h100", "qwen3vl-4b", **kw).memory.static_bytes

    params = build_preset_table("h100", "qwen3vl-4b").provenance["params_per_rank"]
    assert static(sharding="none") == pytest.approx(18 * params)
    assert static(sharding="distributed_optimizer", shard_ranks=8) == pytest.approx((6 + 12 / 8) * params)
    assert static(sharding="fsdp", shard_ranks=64) == pytest.approx(16 / 64 * params)
    assert static(shard_ranks=64) < static(shard_ranks=8)


def test_ranks_per_node_override_reaches_the_cost_model() -> None:
    cost = CostModel.from_preset("a3-qwen3vl-8b", ranks_per_node=8)
    assert cost.ranks_per_node == 8 and cost.table.hardware.ranks_per_node == 8


def test_hardware_ordering() -> None:
    def per_token(hw: str) -> float:
        return build_preset_table(hw, "qwen3vl-8b").time.linear_ms_per_token

    assert per_token("h100") < per_token("a3") < per_token("910b")
    h200, h100 = CostModel.from_preset("h200-qwen3vl-8b"), CostModel.from_preset("h100-qwen3vl-8b")
    assert h200.capacity_tokens > h100.capacity_tokens


def test_cpu_preset_runs_the_tiny_model_in_fp32() -> None:
    table = build_preset_table("cpu", "tiny")
    assert table.dtype == "fp32" and table.recompute == "none" and table.hardware.device == "cpu"
    with pytest.raises(ValueError, match=r"dtype 'bf16' not supported on 'cpu'; valid: \['fp32'\]"):
        build_preset_table("cpu", "tiny", dtype="bf16")
