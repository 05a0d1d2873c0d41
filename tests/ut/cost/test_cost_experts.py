"""Mixture-of-experts terms of the cost model: shapes from the models' published configs, parameters against
transformers' own Qwen3-VL models, FLOPs, memory and the FSDP round by hand, the attention-bound crossover, expert
parallelism's all-to-alls, the presets' provenance and the table's expert fields."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable, ProfileTableError, list_presets, preset_table
from mindspeed_mm.core.fcp.cost.coefficients import StageCoefficients
from mindspeed_mm.core.fcp.cost.expert_terms import GROUPED_GEMM_SHARE
from mindspeed_mm.core.fcp.cost.model_config import read_model_config
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS

CONFIGS = Path(__file__).parent / "model_configs"
PUBLISHED = {"qwen3vl-32b": "qwen3vl_32b.json", "qwen3vl-30b-a3b": "qwen3vl_30b_a3b.json",
             "qwen3vl-235b-a22b": "qwen3vl_235b_a22b.json"}
MOE = ("qwen3vl-30b-a3b", "qwen3vl-235b-a22b")


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_presets_hold_the_shapes_of_the_published_configs(model: str) -> None:
    config = read_model_config(CONFIGS / PUBLISHED[model])
    assert config.decoder == MODELS[model].decoder
    assert config.encoder == MODELS[model].encoder


def test_parameters_are_those_of_transformers_qwen3vl_models() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for model, file in PUBLISHED.items():
        doc = json.loads((CONFIGS / file).read_text())
        moe = doc["model_type"] == "qwen3_vl_moe"
        config_class = transformers.Qwen3VLMoeConfig if moe else transformers.Qwen3VLConfig
        model_class = (transformers.Qwen3VLMoeForConditionalGeneration if moe
                       else transformers.Qwen3VLForConditionalGeneration)
        hf_config = config_class(text_config=doc["text_config"], vision_config=doc["vision_config"],
                                 tie_word_embeddings=False)
        with torch.device("meta"):
            hf = model_class(hf_config)
        language = sum(p.numel() for n, p in hf.named_parameters() if not n.startswith("model.visual"))
        everything = sum(p.numel() for p in hf.parameters())
        dec, enc = MODELS[model].decoder, MODELS[model].encoder
        assert dec.layers * dec.layer_params() + dec.embedding_params() + dec.head_params() == language, model
        # The encoder's biases, norms and position embedding are approximated (`EncoderShape.params`).
        total = preset_table(f"h200-{model}", shard_ranks=256).provenance["total_params"]
        assert total == pytest.approx(everything, rel=2e-3), model
        assert total - language == enc.params()


def test_active_parameters_are_the_router_and_top_k_experts() -> None:
    dec = MODELS["qwen3vl-30b-a3b"].decoder
    attention = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048
    assert dec.active_matmul_params() == attention + 2048 * 128 + 8 * 3 * 2048 * 768
    assert dec.layer_matmul_params() == attention + 2048 * 128 + 128 * 3 * 2048 * 768
    table = preset_table("h200-qwen3vl-30b-a3b", shard_ranks=256)
    # 3.35B parameters active per token [MM30 as summarised in presets.md], 30.5B without the encoder.
    assert table.provenance["active_params_per_token"] / 1e9 == pytest.approx(3.35, abs=0.01)
    assert (table.provenance["total_params"] - MODELS["qwen3vl-30b-a3b"].encoder.params()) / 1e9 == pytest.approx(
        30.5, abs=0.05)


@pytest.mark.parametrize("model,flop_crossover", [("qwen3vl-8b", 47_104), ("qwen3vl-30b-a3b", 13_888),
                                                  ("qwen3vl-235b-a22b", 27_200)])
def test_moe_models_are_attention_bound_from_14k_to_27k_tokens(model: str, flop_crossover: int) -> None:
    """A causal document of s tokens costs 2 s heads head_dim attention FLOPs per token and layer against 2 x
    the active weights of its linear work: equal at s = active / (heads head_dim). The presets' times put the
    crossover where the attention grid per token meets the linear work per token."""
    dec = MODELS[model].decoder
    assert dec.active_matmul_params() / (dec.heads * dec.head_dim) == flop_crossover
    if model == "qwen3vl-8b":
        return
    for hardware in ("a3", "h200"):
        table = preset_table(f"{hardware}-{model}", shard_ranks=256)
        alpha, beta, gamma = StageCoefficients.from_table(table).attention_fit
        per_token = table.time.linear_ms_per_token
        crossover = max(np.roots([alpha, beta - per_token, gamma]).real)
        # The experts' grouped GEMMs at GROUPED_GEMM_SHARE of the dense GEMMs' efficiency and the attention kernel's
        # own efficiency move the FLOP crossover by up to a fifth.
        assert 0.9 * flop_crossover < crossover < 1.2 * flop_crossover, (hardware, crossover)
    dense = preset_table("a3-qwen3vl-8b")
    alpha, beta, gamma = StageCoefficients.from_table(dense).attention_fit
    dense_crossover = max(np.roots([alpha, beta - dense.time.linear_ms_per_token, gamma]).real)
    assert crossover < dense_crossover


def test_routed_expert_work_by_hand() -> None:
    hw, dec = HARDWARE["a3"], MODELS["qwen3vl-30b-a3b"].decoder
    table = preset_table("a3-qwen3vl-30b-a3b")
    rate = hw.peak_tflops["bf16"] * 1e12 * hw.linear_efficiency * GROUPED_GEMM_SHARE
    routed = 1e3 * 3 * (2 * 8 * 3 * 2048 * 768 / rate + 8 * (4 * 2048 + 6 * 768) * 2 / hw.memory_bytes_per_s)
    assert table.time.expert_ms_per_token == pytest.approx(routed)
    dense_rate = hw.peak_tflops["bf16"] * 1e12 * hw.linear_efficiency
    rest = 1e3 * 3 * (2 * (dec.active_matmul_params() - 8 * 3 * 2048 * 768) / dense_rate
                      + 12 * 2048 * 2 / hw.memory_bytes_per_s)
    assert table.time.linear_ms_per_token == pytest.approx(rest + routed)


def test_expert_activations_and_memory_by_hand() -> None:
    dec = MODELS["qwen3vl-30b-a3b"].decoder
    dense_part = 8 * 2048 + 4 * 32 * 128 + 4 * 4 * 128
    assert dec.layer_activation_bytes() == dense_part + 4 * 128 + 8 * (4 * 2048 + 6 * 768) == 137_728
    assert MODELS["qwen3vl-235b-a22b"].decoder.layer_activation_bytes() == (
        8 * 4096 + 4 * 64 * 128 + 4 * 4 * 128 + 4 * 128 + 8 * (4 * 4096 + 6 * 1536))
    table = preset_table("a3-qwen3vl-30b-a3b", shard_ranks=64)
    params = table.provenance["params_per_rank"]
    assert table.memory.static_bytes == pytest.approx(16 * params / 64)
    # Two layers in flight (current + prefetch), parameters and gradients, every expert gathered in bf16.
    layer = dec.layer_params()
    assert table.memory.workspace_bytes == pytest.approx(2 * 2**30 + 2 * 2 * 2 * layer)
    split = preset_table("a3-qwen3vl-30b-a3b", shard_ranks=64, expert_parallel=8)
    routed = 128 * 3 * 2048 * 768
    assert split.memory.workspace_bytes == pytest.approx(2 * 2**30 + 2 * 2 * 2 * (layer - routed + routed / 8))
    assert split.memory.static_bytes == table.memory.static_bytes


def test_fsdp_round_gathers_the_whole_parameter_count() -> None:
    dense, moe = preset_table("h200-qwen3vl-8b", shard_ranks=64), preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64)
    ratio = moe.provenance["params_per_rank"] / dense.provenance["params_per_rank"]
    assert 3.4 < ratio < 3.6
    assert moe.step.fsdp_round_ms / dense.step.fsdp_round_ms == pytest.approx(ratio)
    # Experts split over 8 ranks are gathered over the 8 ranks holding the same ones: 1/8 of them, 7/8 of that.
    hw = HARDWARE["h200"]
    bus = hw.inter_node_bytes_per_s * hw.inter_efficiency
    params = moe.provenance["params_per_rank"]
    routed = 48 * 128 * 3 * 2048 * 768
    split = preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64, expert_parallel=8)
    gathered = (params - routed) * 63 / 64 + routed / 8 * 7 / 8
    assert split.step.fsdp_round_ms == pytest.approx(1e3 * (2 * 2 + 4) * gathered / bus)
    assert split.step.fsdp_round_ms < moe.step.fsdp_round_ms / 3


def test_expert_parallel_all_to_alls_by_hand() -> None:
    hw = HARDWARE["h200"]
    inside = preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64, expert_parallel=8)
    grid = inside.time.expert_exchange_ms
    per_token = 8 * 2048 * 2 * 7 / 8
    bandwidth = hw.a2a_intra_bytes_per_s * hw.a2a_efficiency
    for tokens, ms in zip(grid.x, grid.y):
        assert ms == pytest.approx(4 * (hw.a2a_latency_ms + 1e3 * tokens * per_token / bandwidth))
    across = preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64, expert_parallel=16).time.expert_exchange_ms
    assert across(4096.0) > 5 * grid(4096.0)   # 16 ranks span two nodes: the network sets the pace
    assert preset_table("h200-qwen3vl-30b-a3b").time.expert_exchange_ms is None
    with pytest.raises(ValueError, match="no experts to split"):
        preset_table("h200-qwen3vl-8b", expert_parallel=2)
    with pytest.raises(ValueError, match="must divide the experts"):
        preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64, expert_parallel=3)


def test_group_times_pay_the_exchange_of_their_tokens() -> None:
    single = CostModel(preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64), max_tokens_per_rank=80_000)
    split = CostModel(preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64, expert_parallel=8),
                      max_tokens_per_rank=80_000)
    work = single.workload([24_000, 8_000])
    grid = split.table.time.expert_exchange_ms
    passes = 1 + 0.5   # full recompute runs the forward pair of all-to-alls once more
    for degree in (1, 2, 4):
        added = float(split.group_time_ms(work, degree, "ring") - single.group_time_ms(work, degree, "ring"))
        assert added == pytest.approx(48 * passes * grid(32_000 / degree), rel=1e-9)


def test_presets_of_every_model_and_their_provenance() -> None:
    names = list_presets()
    for model in MOE:
        assert {f"a3-{model}", f"h200-{model}"} <= set(names)
        assert f"h100-{model}" not in names
    assert {f"{hw}-qwen3vl-32b" for hw in ("a3", "910b", "h100", "h200")} <= set(names)
    table = preset_table("a3-qwen3vl-235b-a22b", shard_ranks=256)
    prov = table.provenance
    assert {"Q235hf", "MM30", "mzoo", "msmm-ep"} <= set(prov["sources"])
    assert prov["options"]["expert_parallel"] == 1 and "expert_sources" in prov
    assert "Q32hf" in preset_table("h100-qwen3vl-32b").provenance["sources"]
    assert "expert_parallel" not in preset_table("a3-qwen3vl-8b").provenance["options"]


def test_expert_fields_round_trip_and_are_checked(tmp_path: Path) -> None:
    table = preset_table("h200-qwen3vl-30b-a3b", shard_ranks=64, expert_parallel=8)
    path = tmp_path / "moe.json"
    table.save(path)
    loaded = ProfileTable.load(path)
    assert loaded.model.experts == table.model.experts and loaded.expert_parallel == 8
    assert loaded.time.expert_exchange_ms == table.time.expert_exchange_ms
    assert loaded.time.expert_ms_per_token == table.time.expert_ms_per_token
    doc = table.to_dict()
    bad_top_k = json.loads(json.dumps(doc))
    bad_top_k["model"]["experts"]["top_k"] = 200
    with pytest.raises(ProfileTableError, match="model.experts.top_k"):
        ProfileTable.from_dict(bad_top_k)
    dense = preset_table("h200-qwen3vl-8b").to_dict()
    with pytest.raises(ProfileTableError, match="'expert_parallel' must be 1 for a model without experts"):
        ProfileTable.from_dict({**dense, "expert_parallel": 2})
    no_exchange = json.loads(json.dumps(doc))
    del no_exchange["time"]["expert_exchange_ms"]
    with pytest.raises(ProfileTableError, match="expert_exchange_ms"):
        ProfileTable.from_dict(no_exchange)
    assert "experts" not in dense["model"] and "expert_parallel" not in dense
    assert dataclasses.replace(table, expert_parallel=1).model.experts is not None
