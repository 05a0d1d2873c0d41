"""The Qwen3-VL family's model adapter: MindSpeed-MM's Qwen3-VL, dense (`qwen3_vl`) and MoE (`qwen3_vl_moe`).

The MoE model's classes inherit the two functions FCP patches (`Qwen3VLModel.forward`, `Qwen3VLTextAttention.forward`)
and its vision tower is the dense model's, so one adapter runs both; the MoE variant refuses what FCP does not
reproduce of its router (`Qwen3VLMoeAdapter.check_recipe`).

What is Qwen3-VL's here: images and videos come as `pixel_values` / `image_grid_thw` and `pixel_values_videos` /
`video_grid_thw`, images first; every image or video token (`image_token_id` / `video_token_id`) takes one row of
the tower's features, and the tower returns the features and one deepstack feature per `deepstack_visual_indexes`
layer, which the adapter carries side by side in one row (`VisionTower.row_width`); the tower attends within a
frame group and places patches by their (h, w) position, so a long video may be encoded in ranges of its frame
groups; position ids are `get_rope_index`'s 3D mRoPE ids of each packed sample.
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, ClassVar

from mindspeed_mm.core.fcp.cost.model_config import recipe_value
from mindspeed_mm_fcp.options import FCPOptionError

from ..model_adapter import ModelAdapter
from ..patches import FCPPatch
from .vision_tokens import count_vision_patches, model_config, vision_token_ids

if TYPE_CHECKING:
    import argparse

    import torch

    from mindspeed_mm.core.fcp.runtime.media_exchange import VisionTower
    from mindspeed_mm.core.fcp.runtime.media_pieces import MediaItem

_MODELING = "mindspeed_mm.models.transformers.qwen3vl"
_ADAPTERS = "mindspeed_mm.features_manager.fcp.qwen3vl.modeling"

IMAGE_KEYS = ("pixel_values", "image_grid_thw")
VIDEO_KEYS = ("pixel_values_videos", "video_grid_thw")
DATA_BALANCE_FLAG = "use_image_mbs_data_balance"


class Qwen3VLAdapter(ModelAdapter):
    """MindSpeed-MM's Qwen3-VL (`mindspeed_mm/models/transformers/qwen3vl/`), dense."""

    family = "Qwen3-VL"
    model_ids: ClassVar[tuple[str, ...]] = ("qwen3_vl",)
    media_keys = IMAGE_KEYS + VIDEO_KEYS

    @property
    def patches(self) -> tuple[FCPPatch, ...]:
        return (
            FCPPatch(
                f"{_MODELING}.modeling_qwen3_vl.Qwen3VLModel.forward", f"{_ADAPTERS}:model_forward_wrapper",
                "Qwen3-VL runs its text decoder on this rank's zigzag shard of the round's packed samples (embeddings "
                "with the vision features of the shard's visual tokens in place, mRoPE ids, deepstack features); the "
                "round's media are encoded once, split over the group or the round as the plan says (one vision-tower "
                "call per round on every rank, as FSDP2 needs)",
                requires=f"{_MODELING}.modeling_qwen3_vl",
            ),
            FCPPatch(
                f"{_MODELING}.modules.Qwen3VLTextAttention.forward", f"{_ADAPTERS}:text_attention_forward_wrapper",
                "Qwen3-VL's text attention runs FCP's ring or Ulysses attention over the round's group",
                requires=f"{_MODELING}.modules",
            ),
        )

    def check_recipe(self, recipe: Mapping[str, Any], path: str, args: "argparse.Namespace") -> None:
        if getattr(args, DATA_BALANCE_FLAG, None):
            raise FCPOptionError(
                f"--use-image-mbs-data-balance (YAML key {DATA_BALANCE_FLAG}) with fcp_cp_algo: FCP assigns every "
                "round's images and videos to the ranks that encode them itself, and its plans price each rank's "
                "share; the data-parallel image balance would deal them out again inside the vision tower, behind "
                "the plan's back. Remove the key: FCP balances the tower's work over each round's ranks")

    # ------------------------------------------------------------------ the data
    def sample_patches(self, dataset: Any, dataset_param: Any, column: str) -> list[int]:
        image_id, video_id, merge = vision_token_ids(dataset_param)
        return count_vision_patches(dataset.with_format("arrow")[column], image_id, video_id, merge)

    def padding_token_id(self, dataset_param: Any) -> int:
        config, _ = model_config(dataset_param)
        special = {config.get(key) for key in ("image_token_id", "video_token_id", "vision_start_token_id",
                                               "vision_end_token_id")}
        return next(token for token in range(len(special) + 1) if token not in special)

    def vision_frozen(self, args: Any) -> bool:
        """Whether the recipe freezes the vision encoder and its projector (`model.image_encoder.*.freeze`): the
        tower then runs its forward pass only, without gradients."""
        encoder = args.mm.model.image_encoder
        return bool(encoder.vision_encoder.freeze and encoder.vision_projector.freeze)

    # ------------------------------------------------------------------ the model, in a round
    def round_media(self, batch: Mapping[str, Any]) -> tuple["torch.Tensor | None", list["MediaItem"]]:
        import torch

        from mindspeed_mm.core.fcp.runtime.media_pieces import media_items

        pixels = [batch.get(key) for key in ("pixel_values", "pixel_values_videos") if batch.get(key) is not None]
        return (torch.cat(pixels) if pixels else None,
                media_items(batch.get("image_grid_thw"), batch.get("video_grid_thw")))

    def feature_rows(self, model: Any, input_ids: "torch.Tensor", items: list["MediaItem"]) -> "torch.Tensor":
        import torch

        from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRuntimeError

        merge_area = model.visual.spatial_merge_size ** 2
        ids = input_ids[0]
        image_mask, video_mask = ids == model.config.image_token_id, ids == model.config.video_token_id
        image_rows = int(image_mask.sum())
        rows = torch.full_like(ids, -1)
        rows[image_mask] = torch.arange(image_rows, device=ids.device)
        rows[video_mask] = image_rows + torch.arange(int(video_mask.sum()), device=ids.device)
        total = sum(item.patches for item in items) // merge_area
        if int((rows >= 0).sum()) != total:
            raise FCPRuntimeError(f"the round's image and video tokens ({int((rows >= 0).sum())}) do not match its "
                                  f"vision features ({total} rows)")
        return rows

    def vision_tower(self, model: Any) -> "VisionTower":
        import torch
        from megatron.training import get_args

        from mindspeed_mm.core.fcp.runtime.media_exchange import VisionTower

        vision = model.config.vision_config
        frozen = self.vision_frozen(get_args())

        def encode(pixels: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
            # [rows, hidden * (1 + deepstack layers)]: the features, then each deepstack layer's, side by side
            with torch.no_grad() if frozen else nullcontext():
                features, deepstack = model.get_image_features(pixels, grids)
            return torch.cat([torch.cat(list(features))] + list(deepstack), dim=-1)

        merge = vision.spatial_merge_size
        pixel_width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2

        def stand_in() -> torch.Tensor:
            # One all-zero merge block keeps this rank's tower calls (FSDP2 collectives) in step with the others'.
            device = model.get_input_embeddings().weight.device
            rows = encode(torch.zeros(merge * merge, pixel_width, device=device),
                          torch.tensor([[1, merge, merge]], device=device))
            return rows.sum() * 0

        return VisionTower(encode=encode, stand_in=stand_in, merge_area=merge * merge,
                           row_width=vision.out_hidden_size * (1 + len(model.visual.deepstack_visual_indexes)),
                           pixel_width=pixel_width, frame_groups_independent=True)

    def embed_shard(self, model: Any, shard_ids: "torch.Tensor", visual_mask: "torch.Tensor", rows: "torch.Tensor",
                    anchor: "torch.Tensor | None") -> dict[str, Any]:
        embeds = model.get_input_embeddings()(shard_ids)  # [1, shard tokens, hidden]
        features, *deepstack = rows.split(model.config.vision_config.out_hidden_size, dim=-1)
        embeds = embeds.masked_scatter(visual_mask.unsqueeze(-1).expand_as(embeds), features.to(embeds.dtype))
        if anchor is not None:
            embeds = embeds + anchor.to(embeds.dtype)
        if rows.shape[0] == 0:
            # Keeps the backward pass of this rank's feature exchange (a collective of the group) in the graph.
            return {"inputs_embeds": embeds + rows.sum().to(embeds.dtype)}
        return {"inputs_embeds": embeds, "visual_pos_masks": visual_mask, "deepstack_visual_embeds": deepstack}

    def position_ids(self, model: Any, input_ids: "torch.Tensor", batch: Mapping[str, Any],
                     seqlens: "torch.Tensor") -> "torch.Tensor":
        positions, _ = model.get_rope_index(input_ids, batch.get("image_grid_thw"), batch.get("video_grid_thw"),
                                            sequence_length=seqlens)
        return positions


class Qwen3VLMoeAdapter(Qwen3VLAdapter):
    """MindSpeed-MM's Qwen3-VL-MoE (`modeling_qwen3_vl_moe.py`: 30B-A3B, 235B-A22B)."""

    model_ids: ClassVar[tuple[str, ...]] = ("qwen3_vl_moe",)
    AUX_LOSS_KEY = "model.loss_cfg.router_aux_loss_coef"

    def check_recipe(self, recipe: Mapping[str, Any], path: str, args: "argparse.Namespace") -> None:
        super().check_recipe(recipe, path, args)
        coefficient = recipe_value(recipe, self.AUX_LOSS_KEY)
        if coefficient not in (None, 0, 0.0):
            raise FCPOptionError(
                f"{path}: {self.AUX_LOSS_KEY}={coefficient!r} with fcp_cp_algo: the router's balancing loss is a "
                "product of two means over the tokens of one forward call, and FCP packs several samples into each "
                "call and shards them over a group, so it would weigh different tokens than the one-sample "
                "micro-batches of a run without FCP; FCP does not reproduce it. Set it to 0.0 (upstream's 30B-A3B "
                "and 235B-A22B recipes do)")


QWEN3_VL = Qwen3VLAdapter()
QWEN3_VL_MOE = Qwen3VLMoeAdapter()

__all__ = ["QWEN3_VL", "QWEN3_VL_MOE", "Qwen3VLAdapter", "Qwen3VLMoeAdapter"]
