"""The shape of the model a run trains, read from its Hugging Face `config.json` (the folder a MindSpeed-MM recipe
names in `model.init_from_hf_path`), for `fcp profile --recipe / --model-config` and the run's table check.

MindSpeed-MM's `pretrain_transformers.py` builds Qwen3-VL from that `config.json`: the recipe's own
`text_decoder.num_layers` / `hidden_size` / `num_attention_heads` are Megatron's argument checks and, in upstream's
words, do not take effect at run time (`examples/qwen3vl/qwen3vl_full_sft_*.yaml`). So the config is the truth about
the shape, and every key of it that changes what FCP prices is read here or refused by name:

- `model_type` `qwen3_vl` (dense) or `qwen3_vl_moe`; any other model is refused.
- `text_config`: layers, hidden size, query / KV heads, head size, MLP size, vocabulary, tied embeddings, q / k / v
  biases; for `qwen3_vl_moe` the experts (`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`, a shared
  expert's `shared_expert_intermediate_size` if the config has one). FCP prices a mixture of experts in every layer:
  `mlp_only_layers` other than empty and `decoder_sparse_step` other than 1 are refused, as are sliding-window
  layers (`use_sliding_window`, `layer_types` other than `full_attention`).
- `vision_config`: depth, hidden size, heads, MLP size, patch / spatial merge / temporal patch sizes, the merged
  width it hands the LLM, and its DeepStack mergers (`deepstack_visual_indexes`).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from mindspeed_mm.core.fcp.cost.shapes import DecoderShape, EncoderShape, ExpertShape
from mindspeed_mm.core.fcp.cost.table_schema import ModelShape, VisionShape

MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe")
"""`config.json` `model_type`s whose shape FCP prices."""
RECIPE_MODEL_KEY = "model.init_from_hf_path"
"""The recipe key naming the Hugging Face model folder `pretrain_transformers.py` builds the model from."""
RECIPE_MODEL_KEYS = (RECIPE_MODEL_KEY, "data.dataset_param.preprocess_parameters.model_name_or_path")
"""Recipe keys naming that folder, in order: the model's, else the data preprocessing's (upstream's recipes set both
to the same folder; a recipe that loads a converted checkpoint instead keeps the second)."""
DEFAULT_VISION_WINDOW = 2880
"""Patches of one vision attention sequence: a 2-frame group of a 720p video (720 merged tokens of 4 patches), the
presets' window (`presets._qwen3vl_vit`); the data sets it, not the model."""


class ModelConfigError(ValueError):
    """A model config (or the recipe naming it) cannot be read, or holds a key FCP does not price; the message
    names the file and the key."""


@dataclass(frozen=True)
class ModelConfig:
    """The priced shape of one Hugging Face Qwen3-VL `config.json`."""

    path: Path
    """The `config.json` read."""
    model_type: str
    """Its `model_type`: one of MODEL_TYPES."""
    decoder: DecoderShape
    """The LLM decoder (with its experts for `qwen3_vl_moe`)."""
    encoder: EncoderShape
    """The vision encoder, with the attention window the table is profiled at."""
    sha256: str
    """Digest of the file's bytes."""

    @property
    def name(self) -> str:
        """The model folder's name (e.g. `Qwen3-VL-30B-A3B-Instruct`)."""
        return self.path.resolve().parent.name

    def model_shape(self) -> ModelShape:
        """The shape as a profile table records it."""
        dec, enc = self.decoder, self.encoder
        return ModelShape(
            name=self.name, layers=dec.layers, hidden=dec.hidden, heads=dec.heads, kv_heads=dec.kv_heads,
            head_dim=dec.head_dim, ffn=dec.ffn, vocab=dec.vocab, attention_mask="causal",
            vision=VisionShape(depth=enc.depth, hidden=enc.hidden, heads=enc.heads, mlp=enc.mlp,
                               patch_size=enc.patch_size, spatial_merge=enc.spatial_merge,
                               temporal_patch=enc.temporal_patch, mergers=enc.mergers),
            experts=dec.experts)

    def provenance(self, recipe: Path | None = None) -> dict[str, Any]:
        """What a table measured on this shape records of where the shape came from."""
        return {"path": str(self.path.resolve()), "sha256": self.sha256, "model_type": self.model_type,
                **({} if recipe is None else {"recipe": str(Path(recipe).resolve()), "recipe_key": RECIPE_MODEL_KEY})}


class _Reader:
    """Typed reads of one config's sections; every error names the file and the key."""

    def __init__(self, path: Path, doc: Mapping[str, Any]) -> None:
        self.path, self.doc = path, doc

    def fail(self, key: str, message: str) -> ModelConfigError:
        return ModelConfigError(f"{self.path}: {key} {message}")

    def section(self, key: str) -> Mapping[str, Any]:
        value = self.doc.get(key)
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be an object, got {value!r}")
        return value

    def count(self, section: str, values: Mapping[str, Any], key: str, minimum: int = 1) -> int:
        value = values.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{section}.{key}", f"must be an int >= {minimum}, got {value!r}")
        return value

    def flag(self, section: str, values: Mapping[str, Any], key: str, default: bool) -> bool:
        value = values.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"{section}.{key}", f"must be true or false, got {value!r}")
        return value


def read_model_config(path: str | os.PathLike[str], vision_window: int = DEFAULT_VISION_WINDOW) -> ModelConfig:
    """The priced shape of a Qwen3-VL `config.json` (or of the model folder holding one); ModelConfigError naming
    the file and the key for anything unreadable or unpriced (module docstring)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        raw = path.read_bytes()
        doc = json.loads(raw)
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read the model config: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ModelConfigError(f"{path}: the model config is not a JSON object")
    reader = _Reader(path, doc)
    model_type = doc.get("model_type")
    if model_type not in MODEL_TYPES:
        raise reader.fail("model_type", f"is {model_type!r}: FCP prices {', '.join(MODEL_TYPES)} (Qwen3-VL dense "
                                        "and mixture of experts) only")
    text = reader.section("text_config")
    decoder = _decoder(reader, text, doc, moe=model_type == "qwen3_vl_moe")
    encoder = _encoder(reader, reader.section("vision_config"), vision_window)
    if encoder.out_hidden != decoder.hidden:
        raise reader.fail("vision_config.out_hidden_size", f"is {encoder.out_hidden}, not the text hidden size "
                                                           f"{decoder.hidden}")
    return ModelConfig(path=path, model_type=model_type, decoder=decoder, encoder=encoder,
                       sha256=hashlib.sha256(raw).hexdigest())


def _decoder(reader: _Reader, text: Mapping[str, Any], doc: Mapping[str, Any], moe: bool) -> DecoderShape:
    s = "text_config"
    if reader.flag(s, text, "use_sliding_window", False):
        raise reader.fail(f"{s}.use_sliding_window", "is true: FCP prices full causal attention in every layer")
    layer_types = text.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list)
                                    or any(kind != "full_attention" for kind in layer_types)):
        raise reader.fail(f"{s}.layer_types", f"is {layer_types!r}: FCP prices full_attention layers only")
    heads = reader.count(s, text, "num_attention_heads")
    kv_heads = reader.count(s, text, "num_key_value_heads")
    if heads % kv_heads:
        raise reader.fail(f"{s}.num_key_value_heads", f"({kv_heads}) must divide num_attention_heads ({heads})")
    tied = reader.flag(s, text, "tie_word_embeddings", reader.flag("<top level>", doc, "tie_word_embeddings", False))
    experts = _experts(reader, text) if moe else None
    return DecoderShape(
        layers=reader.count(s, text, "num_hidden_layers"), hidden=reader.count(s, text, "hidden_size"), heads=heads,
        kv_heads=kv_heads, head_dim=reader.count(s, text, "head_dim"), ffn=reader.count(s, text, "intermediate_size"),
        vocab=reader.count(s, text, "vocab_size"), tied_embeddings=tied,
        qkv_bias=reader.flag(s, text, "attention_bias", False), qk_norm=True, experts=experts)


def _experts(reader: _Reader, text: Mapping[str, Any]) -> ExpertShape:
    s = "text_config"
    sparse_step = text.get("decoder_sparse_step", 1)
    if sparse_step != 1:
        raise reader.fail(f"{s}.decoder_sparse_step", f"is {sparse_step!r}: FCP prices a mixture of experts in every "
                                                      "layer (decoder_sparse_step 1)")
    dense_layers = text.get("mlp_only_layers", [])
    if dense_layers:
        raise reader.fail(f"{s}.mlp_only_layers", f"is {dense_layers!r}: FCP prices a mixture of experts in every "
                                                  "layer (mlp_only_layers [])")
    experts = reader.count(s, text, "num_experts")
    top_k = reader.count(s, text, "num_experts_per_tok")
    if top_k > experts:
        raise reader.fail(f"{s}.num_experts_per_tok", f"({top_k}) exceeds num_experts ({experts})")
    return ExpertShape(experts=experts, top_k=top_k, expert_ffn=reader.count(s, text, "moe_intermediate_size"),
                       shared_expert_ffn=reader.count(s, text, "shared_expert_intermediate_size", minimum=0)
                       if "shared_expert_intermediate_size" in text else 0)


def _encoder(reader: _Reader, vision: Mapping[str, Any], window: int) -> EncoderShape:
    s = "vision_config"
    deepstack = vision.get("deepstack_visual_indexes", [])
    if not isinstance(deepstack, list):
        raise reader.fail(f"{s}.deepstack_visual_indexes", f"must be a list, got {deepstack!r}")
    merge = reader.count(s, vision, "spatial_merge_size")
    if isinstance(window, bool) or not isinstance(window, int) or window < merge * merge or window % (merge * merge):
        raise ModelConfigError(f"vision window of {window!r} patches must be a positive multiple of the "
                               f"{merge * merge} patches of one merged token")
    return EncoderShape(
        depth=reader.count(s, vision, "depth"), hidden=reader.count(s, vision, "hidden_size"),
        heads=reader.count(s, vision, "num_heads"), mlp=reader.count(s, vision, "intermediate_size"),
        patch_size=reader.count(s, vision, "patch_size"), spatial_merge=merge,
        temporal_patch=reader.count(s, vision, "temporal_patch_size"),
        out_hidden=reader.count(s, vision, "out_hidden_size"), mergers=1 + len(deepstack), attention_window=window)


def recipe_model_folder(doc: Any) -> tuple[str, str] | None:
    """(key, folder) of the first of RECIPE_MODEL_KEYS a recipe document sets; None when it sets none."""
    for key in RECIPE_MODEL_KEYS:
        folder = recipe_value(doc, key)
        if isinstance(folder, str) and folder:
            return key, folder
    return None


def recipe_model_config_path(recipe: str | os.PathLike[str]) -> Path:
    """The `config.json` a MindSpeed-MM recipe's model is built from (`recipe_model_folder`; relative paths from the
    current folder, as `pretrain_transformers.py` reads them); ModelConfigError naming the recipe and the key."""
    recipe = Path(recipe)
    try:
        doc = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelConfigError(f"{recipe}: cannot read the recipe: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ModelConfigError(f"{recipe}: not valid YAML: {exc}") from exc
    located = recipe_model_folder(doc)
    if located is None:
        raise ModelConfigError(f"{recipe}: {' or '.join(RECIPE_MODEL_KEYS)} must name the Hugging Face model folder")
    key, folder = located
    config = Path(folder) / "config.json"
    if not config.is_file():
        raise ModelConfigError(f"{recipe}: {key}={folder!r}: no config.json at {config.resolve()} (relative paths are "
                               "read from the current folder, as pretrain_transformers.py reads them)")
    return config


def recipe_vision_window(recipe: str | os.PathLike[str], patch_size: int, spatial_merge: int) -> int | None:
    """Patches of one vision attention sequence of the largest frame a recipe's data keeps: `video_max_pixels` when
    it reads videos (`data.dataset_param.attr.videos`), else `image_max_pixels`, in patch_size x patch_size patches
    and at least one merged token; None when the recipe sets neither (the caller's default applies)."""
    doc = yaml.safe_load(Path(recipe).read_text(encoding="utf-8"))
    preprocess = recipe_value(doc, "data.dataset_param.preprocess_parameters") or {}
    reads_videos = bool(recipe_value(doc, "data.dataset_param.attr.videos"))
    pixels = preprocess.get("video_max_pixels" if reads_videos else "image_max_pixels")
    if isinstance(pixels, bool) or not isinstance(pixels, int) or pixels <= 0:
        return None
    return max(spatial_merge * spatial_merge, pixels // (patch_size * patch_size))


def recipe_value(doc: Any, dotted: str) -> Any:
    """The value at a dotted key of a YAML document (None where a part is missing)."""
    node = doc
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


_DECODER_FIELDS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn")
_PRICED_VISION = ("depth", "hidden", "heads", "mlp", "patch_size", "spatial_merge", "temporal_patch", "mergers")


def decoder_differences(made_for: ModelShape, model: ModelShape) -> list[str]:
    """`model.<field>=<made_for's> vs <model's>` for every field of the decoder's layers (sizes, heads, experts) in
    which two shapes differ: the fields every per-token and attention term depends on."""
    out = [f"model.{f}={getattr(made_for, f)} vs {getattr(model, f)}" for f in _DECODER_FIELDS
           if getattr(made_for, f) != getattr(model, f)]
    if made_for.experts != model.experts:
        out.append(f"model.experts={_experts_text(made_for.experts)} vs {_experts_text(model.experts)}")
    return out


def shape_differences(made_for: ModelShape, model: ModelShape) -> list[str]:
    """`decoder_differences`, then the vocabulary and the vision encoder's fields in which two shapes differ (every
    priced field; the name and the attention mask aside)."""
    out = decoder_differences(made_for, model)
    if made_for.vocab != model.vocab:
        out.append(f"model.vocab={made_for.vocab} vs {model.vocab}")
    if (made_for.vision is None) != (model.vision is None):
        out.append(f"model.vision={'none' if made_for.vision is None else 'an encoder'} vs "
                   f"{'none' if model.vision is None else 'an encoder'}")
    elif made_for.vision is not None and model.vision is not None:
        out.extend(f"model.vision.{f}={getattr(made_for.vision, f)} vs {getattr(model.vision, f)}"
                   for f in _PRICED_VISION if getattr(made_for.vision, f) != getattr(model.vision, f))
    return out


def describe_shape(shape: ModelShape) -> str:
    """One line naming a shape's priced fields."""
    text = (f"{shape.name} ({shape.layers} layers, hidden {shape.hidden}, {shape.heads}/{shape.kv_heads} heads of "
            f"{shape.head_dim}, ffn {shape.ffn}, vocab {shape.vocab}, experts {_experts_text(shape.experts)}")
    vision = shape.vision
    if vision is not None:
        text += (f", vision {vision.depth} blocks of {vision.hidden} with {vision.heads} heads, mlp {vision.mlp}, "
                 f"patch {vision.patch_size}, merge {vision.spatial_merge}, temporal {vision.temporal_patch}, "
                 f"{vision.mergers} mergers")
    return text + ")"


def _experts_text(experts: ExpertShape | None) -> str:
    if experts is None:
        return "none"
    return ", ".join(f"{f.name} {getattr(experts, f.name)}" for f in fields(experts)).join("[]")


__all__ = ["DEFAULT_VISION_WINDOW", "MODEL_TYPES", "RECIPE_MODEL_KEY", "RECIPE_MODEL_KEYS", "ModelConfig",
           "ModelConfigError", "decoder_differences", "describe_shape", "read_model_config", "recipe_model_config_path",
           "recipe_model_folder", "recipe_value", "shape_differences"]
