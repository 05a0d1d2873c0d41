"""The model a MindSpeed-MM Qwen3-VL recipe trains, as `fcp profile --recipe` profiles it.

MindSpeed-MM's Qwen3-VL takes its shape from the Hugging Face folder the recipe loads (`model.init_from_hf_path`,
its `config.json`: `text_config` and `vision_config`; the recipe's own `num_layers` / `hidden_size` keys are
only Megatron's checks). The encoder's attention window is one frame group of the largest frame the recipe's
data keeps (`video_max_pixels` when the recipe reads videos, else `image_max_pixels`), in patches.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mindspeed_mm.core.fcp.cost.shapes import EncoderShape
from mindspeed_mm.core.fcp.cost.table import ModelShape


@dataclass(frozen=True)
class RecipeModel:
    """What `fcp profile` needs of a recipe's model."""

    name: str
    """The model's name in the table: its Hugging Face folder's name."""
    decoder: ModelShape
    """The text decoder (`vision` None; the profile adds the encoder's)."""
    encoder: EncoderShape
    """The vision encoder."""
    config_path: Path
    """The `config.json` it was read from."""


def _key(section: Any, path: str, source: Path) -> Any:
    value = section
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ValueError(f"--recipe {source}: no key {path!r} (a MindSpeed-MM Qwen3-VL recipe names its model "
                             f"folder in model.init_from_hf_path)")
        value = value[part]
    return value


def _config_file(recipe: Path, folder: str) -> Path:
    """The model folder's config.json: as written (the launch folder), else relative to the recipe."""
    for candidate in (Path(folder), recipe.parent / folder):
        if (candidate / "config.json").is_file():
            return candidate / "config.json"
    raise ValueError(f"--recipe {recipe}: model.init_from_hf_path {folder!r} holds no config.json (looked in "
                     f"{Path(folder).resolve()} and {(recipe.parent / folder).resolve()})")


def read_recipe_model(path: str | Path) -> RecipeModel:
    """The decoder and encoder shapes of the Qwen3-VL a recipe YAML trains; a missing key or file raises
    ValueError naming it."""
    recipe = Path(path)
    try:
        doc = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--recipe {recipe}: cannot read it as YAML: {exc}") from exc
    config_path = _config_file(recipe, str(_key(doc, "model.init_from_hf_path", recipe)))
    config = json.loads(config_path.read_text(encoding="utf-8"))
    text, vision = config.get("text_config"), config.get("vision_config")
    if not isinstance(text, dict) or not isinstance(vision, dict):
        raise ValueError(f"{config_path}: not a Qwen3-VL config (text_config and vision_config expected)")
    try:
        heads = int(text["num_attention_heads"])
        decoder = ModelShape(
            name=config_path.parent.name, layers=int(text["num_hidden_layers"]), hidden=int(text["hidden_size"]),
            heads=heads, kv_heads=int(text.get("num_key_value_heads", heads)),
            head_dim=int(text.get("head_dim", int(text["hidden_size"]) // heads)), ffn=int(text["intermediate_size"]),
            vocab=int(text["vocab_size"]), attention_mask="causal", vision=None)
        patch = int(vision["patch_size"])
        preprocess = doc.get("data", {}).get("dataset_param", {}).get("preprocess_parameters", {})
        reads_videos = bool(doc.get("data", {}).get("dataset_param", {}).get("attr", {}).get("videos"))
        pixels = preprocess.get("video_max_pixels") if reads_videos else preprocess.get("image_max_pixels")
        merge = int(vision["spatial_merge_size"])
        window = max(merge * merge, int(pixels) // (patch * patch)) if pixels else merge * merge * 16
        encoder = EncoderShape(
            depth=int(vision["depth"]), hidden=int(vision["hidden_size"]), heads=int(vision["num_heads"]),
            mlp=int(vision["intermediate_size"]), patch_size=patch, spatial_merge=merge,
            temporal_patch=int(vision["temporal_patch_size"]), out_hidden=int(vision["out_hidden_size"]),
            mergers=1 + len(vision.get("deepstack_visual_indexes") or ()), attention_window=window)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{config_path}: a Qwen3-VL config needs {exc} in text_config / vision_config") from exc
    return RecipeModel(decoder.name, decoder, encoder, config_path)
