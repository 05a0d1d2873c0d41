"""The FCP recipe is upstream's Qwen3-VL 8B recipe with only the FCP keys and the long-video keys changed; upstream's
32B, 30B-A3B and 235B-A22B recipes with the same changes pass FCP's validation.

That it trains is `test_fcp_training.py` (the MoE model: `test_fcp_moe.py`); here, that a user gets FCP by changing
two values of upstream's recipe (`context_parallel_algo` and `sampler_type`) and adding `fcp_*` keys. (Another
sampler under `fcp_cp_algo` is refused naming the YAML key: `tests/ut/feature/test_feature_data_loader.py`; the
training test shows the wrapper is what upstream's data loader builder runs.)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

import bed as bed_sources
from bed import REPO
from conftest import unavailable

FCP_RECIPE = REPO / "examples" / "qwen3vl" / "qwen3vl_full_sft_8B_fcp.yaml"
UPSTREAM_RECIPE = Path("examples") / "qwen3vl" / "qwen3vl_full_sft_8B.yaml"
FCP_CHANGES = {"gpt_args.context_parallel_algo": ("ulysses_cp_algo", "fcp_cp_algo"),
               "data.dataloader_param.sampler_type": ("BaseRandomBatchSampler", "FCPBatchSampler")}
"""Upstream keys whose value FCP's recipe changes (old, new) to run FCP."""
LONG_VIDEO_CHANGES = {"gpt_args.seq_length": (1024, 131072),
                      "data.dataset_param.attr.videos": (None, "videos"),
                      "data.dataset_param.preprocess_parameters.video_max_pixels": (16384, 768 * 32 * 32),
                      "data.dataset_param.preprocess_parameters.video_min_pixels": (0, 128 * 32 * 32),
                      "data.dataset_param.preprocess_parameters.video_maxlen": (64, 768)}
"""Upstream keys FCP's recipe changes for long videos, the data FCP is for: upstream's recipe truncates every
sample to 1024 tokens and reads images only, so it never forms a CP group. Values from the Qwen3-VL video rule
(patch 16, merge 2: 32 x 32 pixels per token; 128 to 768 tokens per 2 frames, up to 768 frames). Every other
change must be a new `fcp_*` key."""


def flatten(node: object, prefix: str = "") -> dict[str, object]:
    if not isinstance(node, dict):
        return {prefix: node}
    flat: dict[str, object] = {}
    for key, value in node.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def test_fcp_recipe_differs_from_upstream_only_in_the_fcp_keys(upstream_bed) -> None:
    upstream = flatten(yaml.safe_load((upstream_bed.sources.mindspeed_mm / UPSTREAM_RECIPE).read_text()))
    ours = flatten(yaml.safe_load(FCP_RECIPE.read_text()))
    removed = sorted(set(upstream) - set(ours))
    added = sorted(set(ours) - set(upstream))
    changed = {key: (upstream[key], ours[key]) for key in set(upstream) & set(ours) if upstream[key] != ours[key]}
    assert removed == []
    assert added and all(key.startswith("gpt_args.fcp_") for key in added), added
    assert changed == {**FCP_CHANGES, **LONG_VIDEO_CHANGES}


UPSTREAM_RECIPES = ("qwen3vl_full_sft_32B.yaml", "qwen3vl_full_sft_30B.yaml", "qwen3vl_full_sft_235B.yaml")
"""Upstream's other Qwen3-VL recipes on `pretrain_transformers.py`: 32B dense, 30B-A3B and 235B-A22B MoE."""


def _fcp_recipe_of(upstream: dict, tmp_path: Path) -> Path:
    """Upstream's recipe with FCP's changes and a cost table of the decoder sizes validation compares it with (the
    Megatron arguments MindSpeed-MM fills from `model.text_decoder`; that the table is the model's is the cost
    source's check)."""
    import dataclasses

    from mindspeed_mm.core.fcp.cost import preset_table

    recipe = dict(upstream)
    for key, (_, new) in FCP_CHANGES.items():
        *parents, last = key.split(".")
        node = recipe
        for part in parents:
            node = node[part]
        node[last] = new
    decoder = recipe["model"]["text_decoder"]
    table = preset_table("a3-qwen3vl-8b")
    shaped = dataclasses.replace(table, model=dataclasses.replace(
        table.model, name="recipe-model", layers=decoder["num_layers"], hidden=decoder["hidden_size"],
        heads=decoder["num_attention_heads"]))
    shaped.save(tmp_path / "table.json")
    recipe["gpt_args"].update(fcp_profile_table=str(tmp_path / "table.json"), fcp_max_degree=8)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def _megatron_args(path: Path) -> argparse.Namespace:
    """The arguments MindSpeed-MM makes of a recipe: its `gpt_args`, the Megatron checks' sizes from
    `model.text_decoder`, the recipe as `--mm-model` / `--mm-data`; 16 ranks."""
    import argparse

    recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    decoder = recipe["model"]["text_decoder"]
    return argparse.Namespace(**recipe["gpt_args"], mm_model=str(path), mm_data=str(path), world_size=16,
                              num_layers=decoder["num_layers"], hidden_size=decoder["hidden_size"],
                              num_attention_heads=decoder["num_attention_heads"])


@pytest.mark.parametrize("name", UPSTREAM_RECIPES)
def test_upstreams_32b_and_moe_recipes_with_fcps_keys_pass_validation(name: str, tmp_path: Path) -> None:
    from mindspeed_mm.features_manager.fcp.validation import FCPArgumentError, validate_fcp_args

    sources = bed_sources.find_sources()
    upstream_path = sources.mindspeed_mm / "examples" / "qwen3vl" / name
    if not upstream_path.is_file():
        unavailable(sources.skip_reason())
    upstream = yaml.safe_load(upstream_path.read_text())
    path = _fcp_recipe_of(upstream, tmp_path)
    validate_fcp_args(_megatron_args(path))
    if upstream["model"]["model_id"] == "qwen3_vl_moe":  # through the MoE adapter, which refuses the balancing loss
        recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
        recipe["model"]["loss_cfg"]["router_aux_loss_coef"] = 0.01
        path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
        with pytest.raises(FCPArgumentError, match=r"model\.loss_cfg\.router_aux_loss_coef=0\.01"):
            validate_fcp_args(_megatron_args(path))
