"""Runs FCP does not support are refused at argument validation, before the model is built, naming the key."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.run_checks import PACKING_KEYS
from mindspeed_mm.features_manager.fcp.validation import FCPArgumentError, validate_fcp_args

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "qwen3vl" / "qwen3vl_full_sft_8B_fcp.yaml"
QWEN3VL_8B = ["--num-layers", "36", "--hidden-size", "4096", "--num-attention-heads", "32"]


def parse(*argv: str, recipe: Path | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--context-parallel-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--num-layers", "--hidden-size", "--num-attention-heads"):
        parser.add_argument(flag, type=int, default=1)
    for flag in ("--sequence-parallel", "--use-txt-dynamic-batching"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--mm-model", default=None)
    parser.add_argument("--mm-data", default=None)
    FCPFeature().register_args(parser)
    extra = ["--mm-model", str(recipe), "--mm-data", str(recipe)] if recipe is not None else []
    args = parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", "--fcp-preset", "a3-qwen3vl-8b",
                              *QWEN3VL_8B, *extra, *argv])
    args.world_size = 8
    return args


def recipe_with(tmp_path: Path, key: str, value: object) -> Path:
    recipe = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    node = recipe
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def test_the_shipped_recipe_passes() -> None:
    validate_fcp_args(parse(recipe=RECIPE))


@pytest.mark.parametrize("argv, message", [
    (["--pipeline-model-parallel-size", "2"], "--pipeline-model-parallel-size=2 (YAML key pipeline_model_parallel_size)"),
    (["--tensor-model-parallel-size", "2", "--sequence-parallel"], "--sequence-parallel (YAML key sequence_parallel)"),
    (["--use-txt-dynamic-batching"], "--use-txt-dynamic-batching (YAML key use_txt_dynamic_batching)"),
])
def test_parallel_layouts_fcp_cannot_run_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(FCPArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_fcp_args(parse(*argv, recipe=RECIPE))


def test_sequence_parallel_without_tensor_parallelism_is_harmless() -> None:
    validate_fcp_args(parse("--sequence-parallel", recipe=RECIPE))


@pytest.mark.parametrize("key, value, message", [
    ("model.model_id", "qwen2_5_vl", "model.model_id='qwen2_5_vl' with fcp_cp_algo: FCP has no model adapter for it; "
                                     "supported: qwen3_vl, qwen3_vl_moe"),
    ("model.model_id", "internvl", "model.model_id='internvl'"),
    ("model.loss_cfg.loss_type", "per_token_loss", "model.loss_cfg.loss_type='per_token_loss'"),
    ("model.loss_cfg.compute_mode", "fused", "model.loss_cfg.compute_mode='fused'"),
    *[(key, True, f"{key}: true with fcp_cp_algo") for key in PACKING_KEYS],
])
def test_recipes_fcp_cannot_run_exactly_are_refused_naming_the_key(tmp_path: Path, key: str, value: object,
                                                                   message: str) -> None:
    with pytest.raises(FCPArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_fcp_args(parse(recipe=recipe_with(tmp_path, key, value)))


def test_the_moe_model_runs_through_its_adapter_and_refuses_the_router_balancing_loss(tmp_path: Path) -> None:
    moe = recipe_with(tmp_path, "model.model_id", "qwen3_vl_moe")
    validate_fcp_args(parse(recipe=moe))
    recipe = yaml.safe_load(moe.read_text(encoding="utf-8"))
    recipe["model"]["loss_cfg"]["router_aux_loss_coef"] = 0.001
    moe.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    with pytest.raises(FCPArgumentError, match=r"model\.loss_cfg\.router_aux_loss_coef=0\.001 with fcp_cp_algo: the "
                                               r"router's balancing loss .* FCP does not reproduce it"):
        validate_fcp_args(parse(recipe=moe))


@pytest.mark.parametrize("model_id", ["qwen3_vl", "qwen3_vl_moe"])
def test_the_image_data_balance_of_the_vision_tower_is_refused_naming_the_key(model_id: str, tmp_path: Path) -> None:
    args = parse(recipe=recipe_with(tmp_path, "model.model_id", model_id))
    args.use_image_mbs_data_balance = True
    with pytest.raises(FCPArgumentError, match=r"--use-image-mbs-data-balance \(YAML key use_image_mbs_data_balance\) "
                                               r"with fcp_cp_algo: FCP assigns every round's images and videos"):
        validate_fcp_args(args)


def test_a_chunked_loss_is_accepted(tmp_path: Path) -> None:
    validate_fcp_args(parse(recipe=recipe_with(tmp_path, "model.loss_cfg.compute_mode", "chunk")))
