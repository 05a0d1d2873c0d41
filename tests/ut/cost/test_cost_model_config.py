"""The run's model shape from its Hugging Face config.json (and the recipe naming it): every key FCP prices is read,
every key that changes the shape in a way FCP does not price is refused by name."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mindspeed_mm.core.fcp.cost.model_config import (
    ModelConfigError,
    describe_shape,
    read_model_config,
    recipe_model_config_path,
    shape_differences,
)
from mindspeed_mm.core.fcp.cost.shapes import ExpertShape

MOE_CONFIG = Path(__file__).parent / "model_configs" / "qwen3vl_30b_a3b.json"


def _write(tmp_path: Path, change: dict[str, Any], section: str = "text_config", drop: str | None = None) -> Path:
    doc = json.loads(MOE_CONFIG.read_text())
    target = doc if section == "<top>" else doc[section]
    target.update(change)
    if drop is not None:
        del target[drop]
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_a_moe_config_gives_its_experts_and_the_folder_names_the_shape(tmp_path: Path) -> None:
    config = read_model_config(_write(tmp_path, {}).parent)
    assert config.model_type == "qwen3_vl_moe" and config.name == "model"
    assert config.decoder.experts == ExpertShape(experts=128, top_k=8, expert_ffn=768)
    assert config.encoder.mergers == 4 and config.encoder.out_hidden == 2048
    shape = config.model_shape()
    assert shape.experts == config.decoder.experts and shape.vision.mergers == 4
    assert "experts [experts 128, top_k 8" in describe_shape(shape)
    prov = config.provenance(recipe=tmp_path / "r.yaml")
    assert prov["model_type"] == "qwen3_vl_moe" and len(prov["sha256"]) == 64 and prov["recipe"].endswith("r.yaml")


def test_a_shared_expert_is_priced(tmp_path: Path) -> None:
    config = read_model_config(_write(tmp_path, {"shared_expert_intermediate_size": 512}))
    assert config.decoder.experts.shared_expert_ffn == 512
    assert config.decoder.active_matmul_params() - read_model_config(MOE_CONFIG).decoder.active_matmul_params() \
        == 3 * 2048 * 512


@pytest.mark.parametrize("change, section, key", [
    ({"model_type": "qwen2_5_vl"}, "<top>", "model_type"),
    ({"mlp_only_layers": [0, 47]}, "text_config", "text_config.mlp_only_layers"),
    ({"decoder_sparse_step": 2}, "text_config", "text_config.decoder_sparse_step"),
    ({"use_sliding_window": True}, "text_config", "text_config.use_sliding_window"),
    ({"layer_types": ["sliding_attention"] * 48}, "text_config", "text_config.layer_types"),
    ({"num_experts_per_tok": 200}, "text_config", "text_config.num_experts_per_tok"),
    ({"num_key_value_heads": 5}, "text_config", "text_config.num_key_value_heads"),
    ({"out_hidden_size": 4096}, "vision_config", "vision_config.out_hidden_size"),
    ({"hidden_size": "2048"}, "text_config", "text_config.hidden_size"),
])
def test_unpriced_or_bad_keys_are_refused_by_name(tmp_path: Path, change: dict, section: str, key: str) -> None:
    path = _write(tmp_path, change, section)
    with pytest.raises(ModelConfigError, match=f"{path}: {key} "):
        read_model_config(path)


def test_missing_keys_and_files_are_named(tmp_path: Path) -> None:
    path = _write(tmp_path, {}, drop="head_dim")
    with pytest.raises(ModelConfigError, match="text_config.head_dim must be an int >= 1, got None"):
        read_model_config(path)
    with pytest.raises(ModelConfigError, match="cannot read the model config"):
        read_model_config(tmp_path / "nowhere")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        read_model_config(bad)


def test_the_recipe_names_the_model_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _write(tmp_path, {}).parent
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"model": {"model_id": "qwen3_vl_moe", "init_from_hf_path": "./model"}}))
    monkeypatch.chdir(tmp_path)
    assert recipe_model_config_path(recipe).resolve() == (model / "config.json").resolve()
    recipe.write_text(yaml.safe_dump({"model": {"init_from_hf_path": "./elsewhere"}}))
    with pytest.raises(ModelConfigError, match=r"model.init_from_hf_path='./elsewhere': no config.json at .*elsewhere"):
        recipe_model_config_path(recipe)
    recipe.write_text(yaml.safe_dump({"model": {"model_id": "qwen3_vl"}}))
    with pytest.raises(ModelConfigError, match="model.init_from_hf_path or data.dataset_param.preprocess_parameters."
                                               "model_name_or_path must name the Hugging Face model folder"):
        recipe_model_config_path(recipe)


def test_shape_differences_name_every_priced_field() -> None:
    moe = read_model_config(MOE_CONFIG).model_shape()
    dense = read_model_config(MOE_CONFIG.with_name("qwen3vl_32b.json")).model_shape()
    differences = shape_differences(moe, dense)
    assert "model.layers=48 vs 64" in differences and "model.hidden=2048 vs 5120" in differences
    assert any(d.startswith("model.experts=[experts 128") and d.endswith("vs none") for d in differences)
    assert shape_differences(moe, moe) == []
