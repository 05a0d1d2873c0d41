"""The model-adapter contract: what FCP needs to know of a model family to run it on MindSpeed-MM's
`pretrain_transformers.py`, and the registry of adapters by the recipe's `model.model_id`.

The round machinery is the model's no matter which model runs (`core/fcp/runtime`: step plans, round loader,
zigzag shard, media spread over a round, row exchange; MindSpeed-MM's data loader and loss here). An adapter says
the rest, for its family:

- which of the model's functions FCP patches (`patches`), and which recipe keys it cannot reproduce
  (`check_recipe`, at argument validation);
- from the preprocessed dataset, before any image is loaded: each sample's tokens and vision-encoder patches;
- in a round: the round's media and the feature row of each token, the vision tower as the round machinery
  calls and splits it (`VisionTower`), the embeddings of this rank's shard with its vision features in place,
  and the position ids of the packed sequence. The loss is MindSpeed-MM's (`TransformersModel`, `loss.py`) for
  every model; an adapter refuses the loss keys of its family that FCP does not reproduce (`check_recipe`).

`shard_inputs` runs these steps for a round in the order every adapter needs them.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from mindspeed_mm_fcp.options import FCPOptionError

if TYPE_CHECKING:
    import argparse

    import torch

    from mindspeed_mm.core.fcp.runtime.media_exchange import VisionTower
    from mindspeed_mm.core.fcp.runtime.media_pieces import MediaItem
    from mindspeed_mm.core.fcp.runtime.round_shard import RoundShard
    from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRuntime

    from .patches import FCPPatch

MODEL_ID_KEY = "model.model_id"


class ModelAdapter(ABC):
    """How FCP runs one model family; one instance per family variant, registered by its `model_ids`."""

    family: ClassVar[str]
    """The family's name in messages ("Qwen3-VL")."""
    model_ids: ClassVar[tuple[str, ...]]
    """The recipe's `model.model_id` values this adapter runs."""
    media_keys: ClassVar[tuple[str, ...]]
    """Per-medium batch keys of a collated sample (pixels, grids), concatenated over the round's samples."""

    # ------------------------------------------------------------------ the run
    @property
    @abstractmethod
    def patches(self) -> tuple["FCPPatch", ...]:
        """The model's functions FCP patches (its forward on the shard, its attention over the group)."""

    def check_recipe(self, recipe: Mapping[str, Any], path: str, args: "argparse.Namespace") -> None:
        """Raises `FCPOptionError` naming a recipe key or flag whose behaviour FCP does not reproduce exactly."""

    # ------------------------------------------------------------------ the data, before any image is loaded
    def sample_lengths(self, dataset: Any, column: str) -> list[int]:
        """Every sample's LLM tokens: the length of its preprocessed token ids (vision tokens already expanded)."""
        import pyarrow.compute as pc

        return [int(n) for n in pc.list_value_length(dataset.with_format("arrow")[column]).to_pylist()]

    @abstractmethod
    def sample_patches(self, dataset: Any, dataset_param: Any, column: str) -> list[int]:
        """Every sample's vision-encoder patches, counted from its preprocessed token ids."""

    @abstractmethod
    def padding_token_id(self, dataset_param: Any) -> int:
        """A token id for the padding document of a short group (`solver.short_shards`): no vision token."""

    @abstractmethod
    def vision_frozen(self, args: Any) -> bool:
        """Whether the run trains its vision tower not at all (the plans then price its forward pass only)."""

    # ------------------------------------------------------------------ the model, in a round
    @abstractmethod
    def round_media(self, batch: Mapping[str, Any]) -> tuple["torch.Tensor | None", list["MediaItem"]]:
        """The round's pixel values (`[patches, pixel width]`, None without media) and its media, in the order of
        their feature rows."""

    @abstractmethod
    def feature_rows(self, model: Any, input_ids: "torch.Tensor", items: list["MediaItem"]) -> "torch.Tensor":
        """`[tokens]` for each token of the packed sequence its row of the round's vision features, -1 for text."""

    @abstractmethod
    def vision_tower(self, model: Any) -> "VisionTower":
        """The model's vision tower as the round machinery calls and splits it."""

    @abstractmethod
    def embed_shard(self, model: Any, shard_ids: "torch.Tensor", visual_mask: "torch.Tensor",
                    rows: "torch.Tensor", anchor: "torch.Tensor | None") -> dict[str, Any]:
        """The decoder's inputs for this rank's shard: its embeddings (`shard_ids` `[1, shard tokens]`) with the
        vision rows (`[visual tokens of the shard, row width]`, shard order) in place at `visual_mask`; `anchor`
        (a zero-valued scalar of a stand-in tower call, or None) joins the graph."""

    @abstractmethod
    def position_ids(self, model: Any, input_ids: "torch.Tensor", batch: Mapping[str, Any],
                     seqlens: "torch.Tensor") -> "torch.Tensor":
        """`[..., tokens]` position ids of the packed sequence (each document from its own start)."""


def shard_inputs(adapter: ModelAdapter, model: Any, runtime: "FCPRuntime", shard: "RoundShard",
                 input_ids: "torch.Tensor", batch: Mapping[str, Any], seqlens: "torch.Tensor") -> dict[str, Any]:
    """The decoder inputs of this rank's shard of the round: embeddings with the vision features in place (the
    group's media encoded as the plan says, `media_exchange.shard_vision_rows`) and the shard's position ids."""
    from mindspeed_mm.core.fcp.runtime.media_exchange import shard_vision_rows

    pixels, items = adapter.round_media(batch)
    feature_rows = adapter.feature_rows(model, input_ids, items)
    rows, anchor = shard_vision_rows(adapter.vision_tower(model), pixels, items, feature_rows, shard, runtime)
    index = shard.global_index.to(input_ids.device)
    visual_mask = feature_rows[index].unsqueeze(0) >= 0  # [1, shard tokens]
    inputs = adapter.embed_shard(model, input_ids[:, index], visual_mask, rows, anchor)
    positions = adapter.position_ids(model, input_ids, batch, seqlens)
    inputs["position_ids"] = positions[..., index.to(positions.device)]
    return inputs


MODEL_ADAPTERS: dict[str, str] = {
    "qwen3_vl": "mindspeed_mm.features_manager.fcp.qwen3vl.adapter:QWEN3_VL",
    "qwen3_vl_moe": "mindspeed_mm.features_manager.fcp.qwen3vl.adapter:QWEN3_VL_MOE",
}
"""`model.model_id` -> `module:attribute` of its adapter (imported on first use)."""


def adapter_for(model_id: Any) -> ModelAdapter:
    """The adapter of `model_id`; `FCPOptionError` naming the key and the supported ids when there is none."""
    target = MODEL_ADAPTERS.get(model_id) if isinstance(model_id, str) else None
    if target is None:
        raise FCPOptionError(
            f"{MODEL_ID_KEY}={model_id!r} with fcp_cp_algo: FCP has no model adapter for it; supported: "
            f"{', '.join(sorted(MODEL_ADAPTERS))} (MindSpeed-MM's Qwen3-VL on pretrain_transformers.py)")
    module, attribute = target.split(":")
    adapter = getattr(importlib.import_module(module), attribute)
    if model_id not in adapter.model_ids:
        raise RuntimeError(f"the adapter {target} is registered for {model_id!r} but runs {adapter.model_ids}")
    return adapter


def run_adapter(args: Any) -> ModelAdapter:
    """The adapter of a running MindSpeed-MM job (its parsed recipe, `args.mm.model.model_id`)."""
    model = getattr(getattr(args, "mm", None), "model", None)
    return adapter_for(getattr(model, "model_id", None))


__all__ = ["MODEL_ADAPTERS", "MODEL_ID_KEY", "ModelAdapter", "adapter_for", "run_adapter", "shard_inputs"]
