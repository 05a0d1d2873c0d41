"""The run's cost source (a measured table or a preset) against the model the run really trains, checked at argument
validation: a table measured on another shape, or a model whose shape FCP has no cost terms for, is refused naming
both shapes or the key.

The model is the one MindSpeed-MM's `pretrain_transformers.py` builds: the Hugging Face `config.json` in the folder
the recipe names (`model.init_from_hf_path`, `cost.model_config`). Its `text_decoder` sizes are only Megatron's
argument checks (upstream's recipes say so, and the 32B one carries the FFN size as its hidden size), so where the
config can be read it is the reference; where it cannot (an entry script without a recipe, a model folder not
there yet) the caller compares the cost source with Megatron's arguments instead.

- A measured table must hold the model's shape field for field (`cost.model_config.shape_differences`: decoder,
  experts, vision encoder, vocabulary), and the expert parallelism the run splits its experts over.
- A preset must hold the model's decoder (layers, sizes, heads, experts): those set every per-token and attention
  term. A preset's vocabulary or vision encoder other than the model's is logged by field: the output layer and the
  encoder are then the preset's (the project's `cpu-tiny` preset is shared by the test bed's and the demo trainer's
  tiny models).
- Expert parallelism (the FSDP2 config's `expert_parallel_size`) must split the experts of the model evenly.
- The presets price the grouped-GEMM experts (`use_npu_fused_moe: true`); a recipe running upstream's per-expert
  loop instead pays host time the presets do not price, which is logged naming the key.
"""
from __future__ import annotations

import argparse
import logging
import os
import yaml

from mindspeed_mm.core.fcp.cost.model_config import (
    ModelConfig,
    ModelConfigError,
    decoder_differences,
    describe_shape,
    read_model_config,
    recipe_model_folder,
    recipe_value,
    shape_differences,
)
from mindspeed_mm.core.fcp.cost.presets import MODELS, split_preset_name, table_model_shape
from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.features_manager.fcp.run_checks import run_recipe
from mindspeed_mm_fcp.options import FCPOptionError

logger = logging.getLogger(__name__)

EXPERT_PARALLEL_KEY = "expert_parallel_size"
"""The key of MindSpeed-MM's FSDP2 config (`fsdp2_config_path`) that splits the experts over ranks."""


def run_model_config(args: argparse.Namespace) -> ModelConfig | None:
    """The shape of the model the run trains, from the config.json its recipe names; None without a recipe or a
    config there. A config naming a model or a key FCP does not price is refused (FCPOptionError naming it)."""
    found = run_recipe(args)
    if found is None:
        return None
    path, recipe = found
    located = recipe_model_folder(recipe)
    if located is None:
        return None
    key, folder = located
    config = os.path.join(folder, "config.json")
    if not os.path.isfile(config):
        logger.warning("FCP: %s: %s=%r holds no config.json here; the cost source is checked against the recipe's "
                       "Megatron sizes instead", path, key, folder)
        return None
    try:
        return read_model_config(config)
    except ModelConfigError as err:
        raise FCPOptionError(f"{path}: {key}: {err}") from None


def run_expert_parallel(args: argparse.Namespace) -> int:
    """The FSDP2 config's `expert_parallel_size` (1 without an FSDP2 config or the key)."""
    path = getattr(args, "fsdp2_config_path", None)
    if not isinstance(path, str) or not os.path.isfile(path):
        return 1
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    value = config.get(EXPERT_PARALLEL_KEY, 1) if isinstance(config, dict) else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FCPOptionError(f"--fsdp2-config-path {path}: {EXPERT_PARALLEL_KEY} must be a positive int, got {value!r}")
    return value


def check_cost_source(args: argparse.Namespace, table: ProfileTable | None, preset: str | None) -> bool:
    """Check the cost source against the run's model config (module docstring); False when there is none to check
    against (the caller then compares with Megatron's arguments)."""
    model = run_model_config(args)
    expert_parallel = run_expert_parallel(args)
    if table is not None:
        if table.expert_parallel != expert_parallel:
            raise FCPOptionError(
                f"--fcp-profile-table {args.fcp_profile_table!r} prices expert_parallel {table.expert_parallel}, but "
                f"the run splits its experts over {EXPERT_PARALLEL_KEY}={expert_parallel} ranks "
                f"(--fsdp2-config-path {getattr(args, 'fsdp2_config_path', None)}); `fcp profile` measures tables "
                "without expert parallelism: use a preset, which prices the run's expert all-to-alls")
    if model is None:
        return False
    _check_experts_split(model, expert_parallel, args)
    _warn_if_experts_loop(args)
    if table is not None:
        differences = shape_differences(table.model, model.model_shape())
        if differences:
            raise FCPOptionError(
                f"--fcp-profile-table {args.fcp_profile_table!r} (YAML key fcp_profile_table) was measured on "
                f"{describe_shape(table.model)}, but the run trains {describe_shape(model.model_shape())} from "
                f"{model.path}: {'; '.join(differences)}; profile this model with "
                "`fcp profile --recipe <this recipe>`")
        return True
    assert preset is not None
    _check_preset(preset, model)
    return True


def _check_experts_split(model: ModelConfig, expert_parallel: int, args: argparse.Namespace) -> None:
    experts = model.decoder.experts
    if expert_parallel == 1:
        return
    if experts is None or experts.experts % expert_parallel:
        raise FCPOptionError(
            f"--fsdp2-config-path {getattr(args, 'fsdp2_config_path', None)}: {EXPERT_PARALLEL_KEY}={expert_parallel} "
            f"must divide the experts of {model.path} ({0 if experts is None else experts.experts})")


def _warn_if_experts_loop(args: argparse.Namespace) -> None:
    found = run_recipe(args)
    if found is None or args.fcp_preset is None:
        return
    path, recipe = found
    key = "model.text_decoder.use_npu_fused_moe"
    if recipe_value(recipe, "model.model_id") == "qwen3_vl_moe" and recipe_value(recipe, key) is False:
        logger.warning("FCP: %s: %s: false runs MindSpeed-MM's per-expert loop, whose host time the preset %s does "
                       "not price (it prices grouped expert GEMMs); measure a table with `fcp profile --recipe`",
                       path, key, args.fcp_preset)


def _check_preset(preset: str, model: ModelConfig) -> None:
    _, name = split_preset_name(preset)
    made_for, shape = table_model_shape(name, MODELS[name]), model.model_shape()
    decoder = decoder_differences(made_for, shape)
    if decoder:
        fitting = [other for other in MODELS if not decoder_differences(table_model_shape(other, MODELS[other]), shape)]
        hint = (f"a preset of this model's decoder is {', '.join(fitting)}" if fitting
                else "no preset has this model's decoder")
        raise FCPOptionError(
            f"--fcp-preset={preset!r} (YAML key fcp_preset) prices {describe_shape(made_for)}, but the run trains "
            f"{describe_shape(shape)} from {model.path}: {'; '.join(decoder)}; {hint}, or measure a table with "
            "`fcp profile --recipe <this recipe>` and pass --fcp-profile-table")
    others = shape_differences(made_for, shape)
    if others:
        logger.warning("FCP: --fcp-preset=%s prices the output layer and vision encoder of %s, not those of %s "
                       "(%s); `fcp profile --recipe` measures the run's own", preset, made_for.name, model.path,
                       "; ".join(others))


__all__ = ["EXPERT_PARALLEL_KEY", "check_cost_source", "run_expert_parallel", "run_model_config"]
