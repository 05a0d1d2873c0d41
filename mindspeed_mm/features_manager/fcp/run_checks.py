"""What an FCP run must be, checked at argument validation, before the model is built: each error names the key.

FCP patches MindSpeed-MM's models on `pretrain_transformers.py` (Megatron's schedule, FSDP2 or DDP) through their
adapters (`model_adapter`). Runs that would be accepted and then break, or train wrongly, are refused here:

- pipeline parallelism: a round's shard lengths change every round, Megatron's pipeline exchanges fixed shapes;
- sequence parallelism with TP > 1: zigzag shards are not multiples of the TP size;
- `use_txt_dynamic_batching`: upstream would re-batch FCP's planned rounds;
- a `model.model_id` without an adapter: nothing patches it; and what the model's adapter refuses of its recipe;
- a loss FCP does not reproduce (`model.loss_cfg`);
- a dataset preprocessed with packing: its segment masks would collapse into one document.

The recipe's `model:` and `data:` sections are read from the YAML MindSpeed-MM passes as `--mm-model` and
`--mm-data` (the same file for `pretrain_transformers.py`); an entry script that passes none is not checked.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

import yaml

from mindspeed_mm.core.fcp.cost.model_config import recipe_value
from mindspeed_mm_fcp.options import FCPOptionError

from .model_adapter import MODEL_ID_KEY, adapter_for

SUPPORTED_LOSS = {"loss_type": ("default",), "compute_mode": ("default", "chunk")}
"""`model.loss_cfg` values FCP reproduces exactly."""
PACKING_KEYS = ("data.dataset_param.attr.packing", "data.dataset_param.attr.pretrain",
                "data.dataset_param.basic_parameters.packing", "data.dataset_param.basic_parameters.neat_packing")
"""Recipe keys that pack several samples into one preprocessed row (`attr.pretrain` packs by default)."""


def _flag(args: argparse.Namespace, dest: str) -> Any:
    return getattr(args, dest, None)


def check_parallel_layout(args: argparse.Namespace) -> None:
    """Pipeline parallelism, and sequence parallelism with TP > 1, are refused."""
    pipeline = _flag(args, "pipeline_model_parallel_size") or 1
    if int(pipeline) > 1:
        raise FCPOptionError(
            f"--pipeline-model-parallel-size={pipeline} (YAML key pipeline_model_parallel_size) with fcp_cp_algo: "
            "FCP's shards change length every round, and Megatron's pipeline exchanges tensors of one fixed "
            "shape; FCP supports pipeline_model_parallel_size: 1")
    tensor = int(_flag(args, "tensor_model_parallel_size") or 1)
    if tensor > 1 and _flag(args, "sequence_parallel"):
        raise FCPOptionError(
            f"--sequence-parallel (YAML key sequence_parallel) with --tensor-model-parallel-size={tensor} and "
            "fcp_cp_algo: FCP's zigzag shards are not multiples of the TP size; remove sequence_parallel")
    if _flag(args, "use_txt_dynamic_batching"):
        raise FCPOptionError(
            "--use-txt-dynamic-batching (YAML key use_txt_dynamic_batching) with fcp_cp_algo: FCP plans every "
            "step's rounds from the global batch itself, and dynamic batching would re-batch them; remove it")


def run_recipe(args: argparse.Namespace) -> tuple[str, Mapping[str, Any]] | None:
    """(path, document) of the recipe the run reads its `model:` and `data:` sections from (None: none given)."""
    paths = {p for p in (_flag(args, "mm_model"), _flag(args, "mm_data")) if isinstance(p, str)}
    yaml_paths = sorted(p for p in paths if p.endswith((".yaml", ".yml")))
    if not yaml_paths:
        return None
    path = yaml_paths[0]
    if not os.path.isfile(path):
        raise FCPOptionError(f"--mm-model {path}: the recipe file does not exist")
    with open(path, encoding="utf-8") as handle:
        recipe = yaml.safe_load(handle)
    if not isinstance(recipe, Mapping):
        raise FCPOptionError(f"--mm-model {path}: the recipe is not a YAML mapping")
    return path, recipe


def recipe_model_id(args: argparse.Namespace) -> Any:
    """The recipe's `model.model_id` (None when the entry script passes no recipe)."""
    found = run_recipe(args)
    return None if found is None else recipe_value(found[1], MODEL_ID_KEY)


def check_recipe(args: argparse.Namespace) -> None:
    """The recipe's model, loss and dataset keys are ones FCP runs exactly."""
    found = run_recipe(args)
    if found is None:
        return
    path, recipe = found
    try:
        adapter = adapter_for(recipe_value(recipe, MODEL_ID_KEY))
    except FCPOptionError as error:
        raise FCPOptionError(f"{path}: {error}") from None
    adapter.check_recipe(recipe, path, args)
    for key, supported in SUPPORTED_LOSS.items():
        value = recipe_value(recipe, f"model.loss_cfg.{key}")
        if value is not None and value not in supported:
            raise FCPOptionError(
                f"{path}: model.loss_cfg.{key}={value!r} with fcp_cp_algo: FCP reproduces "
                f"{', '.join(supported)} only")
    for key in PACKING_KEYS:
        if recipe_value(recipe, key):
            raise FCPOptionError(
                f"{path}: {key}: true with fcp_cp_algo: a packed row holds several samples, which FCP would "
                "train as one document; FCP packs each round's samples itself, so preprocess without packing")


def check_supported_run(args: argparse.Namespace) -> None:
    """Every check of this module."""
    check_parallel_layout(args)
    check_recipe(args)


__all__ = ["PACKING_KEYS", "SUPPORTED_LOSS", "check_parallel_layout", "check_recipe", "check_supported_run",
           "recipe_model_id", "run_recipe"]
