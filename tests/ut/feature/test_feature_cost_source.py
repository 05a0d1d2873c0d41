"""The run's cost source against the model it trains (the config.json its recipe names): a table of another shape, a
preset of another decoder, a config FCP has no cost terms for or experts split unevenly are refused at validation,
naming both shapes or the key."""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest
import yaml

from mindspeed_mm.core.fcp.cost import ProfileTable, preset_table
from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.cost_source import check_cost_source, run_expert_parallel
from mindspeed_mm.features_manager.fcp.validation import FCPArgumentError, validate_fcp_args

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "qwen3vl" / "qwen3vl_full_sft_8B_fcp.yaml"
CONFIGS = ROOT / "tests" / "ut" / "cost" / "model_configs"


def _run(tmp_path: Path, config: str, *argv: str, change: dict | None = None, fsdp2: dict | None = None,
         model_id: str = "qwen3_vl") -> argparse.Namespace:
    """Arguments of a run whose recipe names a model folder holding `config` (a published config of
    tests/ut/cost/model_configs), with upstream's Megatron check sizes of the 32B recipe."""
    folder = tmp_path / "hf"
    folder.mkdir(exist_ok=True)
    doc = json.loads((CONFIGS / config).read_text())
    doc["text_config"].update(change or {})
    (folder / "config.json").write_text(json.dumps(doc))
    recipe = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    recipe["model"]["init_from_hf_path"] = str(folder)
    recipe["model"]["model_id"] = model_id
    recipe_path = tmp_path / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    parser = argparse.ArgumentParser()
    for flag in ("--context-parallel-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
        parser.add_argument(flag, type=int, default=1)
    # Upstream's 32B recipe gives Megatron 64 layers, "hidden size" 25600 (its FFN size) and 64 heads: checks only.
    parser.add_argument("--num-layers", type=int, default=64)
    parser.add_argument("--hidden-size", type=int, default=25600)
    parser.add_argument("--num-attention-heads", type=int, default=64)
    for flag in ("--mm-model", "--mm-data", "--fsdp2-config-path"):
        parser.add_argument(flag, default=None)
    FCPFeature().register_args(parser)
    extra = []
    if fsdp2 is not None:
        fsdp2_path = tmp_path / "fsdp2_config.yaml"
        fsdp2_path.write_text(yaml.safe_dump(fsdp2))
        extra = ["--fsdp2-config-path", str(fsdp2_path)]
    args = parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", "--mm-model", str(recipe_path),
                              "--mm-data", str(recipe_path), *extra, *argv])
    args.world_size = 16
    return args


def _table(tmp_path: Path, preset: str, **options: int) -> str:
    path = tmp_path / f"{preset}.json"
    preset_table(preset, **options).save(path)
    return str(path)


def test_the_32b_recipe_is_checked_against_its_config_not_megatrons_check_sizes(tmp_path: Path) -> None:
    validate_fcp_args(_run(tmp_path, "qwen3vl_32b.json", "--fcp-preset", "a3-qwen3vl-32b"))
    validate_fcp_args(_run(tmp_path, "qwen3vl_32b.json", "--fcp-profile-table", _table(tmp_path, "a3-qwen3vl-32b")))


def test_a_table_measured_on_another_shape_is_refused_naming_both(tmp_path: Path) -> None:
    table = _table(tmp_path, "a3-qwen3vl-8b")
    with pytest.raises(FCPArgumentError, match=r"was measured on qwen3vl-8b \(36 layers, hidden 4096.*but the run "
                                               r"trains hf \(64 layers, hidden 5120.*model.layers=36 vs 64"):
        validate_fcp_args(_run(tmp_path, "qwen3vl_32b.json", "--fcp-profile-table", table))


def test_a_preset_of_another_decoder_is_refused_naming_the_fitting_one(tmp_path: Path) -> None:
    with pytest.raises(FCPArgumentError, match=r"--fcp-preset='a3-qwen3vl-8b' .* prices qwen3vl-8b .* the run trains "
                                               r"hf .*a preset of this model's decoder is qwen3vl-32b"):
        validate_fcp_args(_run(tmp_path, "qwen3vl_32b.json", "--fcp-preset", "a3-qwen3vl-8b"))


def test_a_config_fcp_has_no_cost_terms_for_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(FCPArgumentError, match=r"model.init_from_hf_path: .*text_config.use_sliding_window is true"):
        validate_fcp_args(_run(tmp_path, "qwen3vl_32b.json", "--fcp-preset", "a3-qwen3vl-32b",
                               change={"use_sliding_window": True}))


def test_moe_sources_against_a_moe_model(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    args = _run(tmp_path, "qwen3vl_30b_a3b.json", "--fcp-preset", "h200-qwen3vl-30b-a3b", model_id="qwen3_vl_moe")
    assert check_cost_source(args, None, args.fcp_preset)
    dense = _run(tmp_path, "qwen3vl_30b_a3b.json", "--fcp-preset", "h200-qwen3vl-8b", model_id="qwen3_vl_moe")
    with pytest.raises(FCPArgumentError, match=r"model.experts=none vs \[experts 128, top_k 8, expert_ffn 768"):
        check_cost_source(dense, None, dense.fcp_preset)
    # A table of the same decoder with another vocabulary is another shape; a preset only logs it.
    other_vocab = _run(tmp_path, "qwen3vl_30b_a3b.json", "--fcp-preset", "h200-qwen3vl-30b-a3b",
                       change={"vocab_size": 152064}, model_id="qwen3_vl_moe")
    with caplog.at_level(logging.WARNING):
        assert check_cost_source(other_vocab, None, other_vocab.fcp_preset)
    assert "model.vocab=151936 vs 152064" in caplog.text
    table = ProfileTable.load(_table(tmp_path, "h200-qwen3vl-30b-a3b", shard_ranks=16))
    other_vocab.fcp_profile_table = "t.json"
    with pytest.raises(FCPArgumentError, match="model.vocab=151936 vs 152064"):
        check_cost_source(other_vocab, table, None)


def test_expert_parallelism_of_the_run_and_of_the_table(tmp_path: Path) -> None:
    args = _run(tmp_path, "qwen3vl_30b_a3b.json", "--fcp-preset", "h200-qwen3vl-30b-a3b",
                fsdp2={"expert_parallel_size": 8}, model_id="qwen3_vl_moe")
    assert run_expert_parallel(args) == 8 and check_cost_source(args, None, args.fcp_preset)
    args.fcp_profile_table = "t.json"
    with pytest.raises(FCPArgumentError, match=r"prices expert_parallel 1, but the run splits its experts over "
                                               r"expert_parallel_size=8 ranks"):
        check_cost_source(args, ProfileTable.load(_table(tmp_path, "h200-qwen3vl-30b-a3b", shard_ranks=16)), None)
    uneven = _run(tmp_path, "qwen3vl_30b_a3b.json", "--fcp-preset", "h200-qwen3vl-30b-a3b",
                  fsdp2={"expert_parallel_size": 3}, model_id="qwen3_vl_moe")
    with pytest.raises(FCPArgumentError, match=r"expert_parallel_size=3 must divide the experts of .* \(128\)"):
        check_cost_source(uneven, None, uneven.fcp_preset)
    assert run_expert_parallel(_run(tmp_path, "qwen3vl_32b.json", fsdp2={"sharding_size": "auto"})) == 1
