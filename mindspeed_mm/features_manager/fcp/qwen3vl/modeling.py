"""MindSpeed-MM's Qwen3-VL under FCP: each rank runs its zigzag shard of its group's packed samples.

Upstream's model sees context parallelism of 1 (FCP's groups are not Megatron's). Inside an FCP
round two wrappers take over:

- `Qwen3VLModel.forward` builds this rank's per-sample zigzag shard of the group's packed sequence: the
  shard's token embeddings with its vision features in place, its visual-position mask and deepstack
  features, and its slice of the 3D mRoPE ids that `get_rope_index` gives each sample of the group; then
  runs the text decoder, final norm and LM head on the shard;
- `Qwen3VLTextAttention.forward` attends over the whole group with FCP's ring or Ulysses attention,
  never across a sample boundary.

The vision tower runs exactly once per round on every rank (under FSDP2 every call is a collective of
all ranks, so each must make the same calls): in a group of several ranks each image or video (a long video
in ranges of its frame groups) is encoded by one member, which sends each member the feature rows of its
shard's visual tokens (`vision_split`); in a round whose plan says `vision_over_round` the media of all its
groups are so spread over all its ranks. A rank without media encodes a stand-in weighted 0. No member holds
the embeddings or vision features of the whole group.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from mindspeed_mm.core.fcp.parallel import fcp_attention

from ..runtime import FCPRuntimeError, get_fcp_runtime
from .shard import SEQLENS_KEY, TextShard, active_shard, round_shard, run_text_decoder_on
from .vision_patches import vision_is_frozen
from .vision_split import encode_media_in_group, encode_media_over_round, media_items


def _vision_rows(model: Any, pixels: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
    """One vision-tower call: `[rows, hidden * (1 + deepstack layers)]`, features then each deepstack layer."""
    context = torch.no_grad() if vision_is_frozen() else nullcontext()
    with context:
        features, deepstack = model.get_image_features(pixels, grids)
    return torch.cat([torch.cat(list(features))] + list(deepstack), dim=-1)


def _stand_in_anchor(model: Any) -> torch.Tensor:
    """A vision-tower call on one all-zero merge block, as a zero-valued scalar: keeps this rank's calls (FSDP2
    collectives) in step with the ranks that have media."""
    vision = model.config.vision_config
    merge = vision.spatial_merge_size
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    device = model.get_input_embeddings().weight.device
    rows = _vision_rows(model, torch.zeros(merge * merge, patch_dim, device=device),
                        torch.tensor([[1, merge, merge]], device=device))
    return rows.sum() * 0


def _feature_rows(input_ids: torch.Tensor, config: Any, image_rows: int) -> torch.Tensor:
    """`[tokens]` for each token of the packed sequence, its row of the round's vision features (image rows
    first, then video rows, each in sequence order), -1 for a text token."""
    ids = input_ids[0]
    image_mask, video_mask = ids == config.image_token_id, ids == config.video_token_id
    rows = torch.full_like(ids, -1)
    rows[image_mask] = torch.arange(int(image_mask.sum()), device=ids.device)
    rows[video_mask] = image_rows + torch.arange(int(video_mask.sum()), device=ids.device)
    return rows


def _shard_inputs(model: Any, input_ids: torch.Tensor, media: dict[str, Any], shard: TextShard
                  ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor] | None]:
    """This rank's shard of the packed sequence: `[1, shard tokens, hidden]` embeddings with the vision features
    in place, `[1, shard tokens]` visual-position mask, and the deepstack features of the shard's visual tokens
    in shard order (None when the shard has none). Only the shard's embeddings and feature rows are built."""
    image_grid, video_grid = media.get("image_grid_thw"), media.get("video_grid_thw")
    pixels = [p for p in (media.get("pixel_values"), media.get("pixel_values_videos")) if p is not None]
    items = media_items(image_grid, video_grid)
    merge_area = model.visual.spatial_merge_size ** 2
    image_rows = sum(item.patches for item in items[: 0 if image_grid is None else len(image_grid)]) // merge_area
    feature_rows = _feature_rows(input_ids, model.config, image_rows)
    total_rows = sum(item.patches for item in items) // merge_area
    if int((feature_rows >= 0).sum()) != total_rows:
        raise FCPRuntimeError(f"the round's image and video tokens ({int((feature_rows >= 0).sum())}) do not match "
                              f"its vision features ({total_rows} rows)")

    def needed(global_index: torch.Tensor) -> torch.Tensor:
        rows = feature_rows[global_index.to(feature_rows.device)].cpu()
        return rows[rows >= 0]

    index = shard.global_index.to(input_ids.device)
    runtime = get_fcp_runtime()
    fcp_round = shard.fcp_round
    width = model.config.vision_config.out_hidden_size * (1 + len(model.visual.deepstack_visual_indexes))
    members_needed = [needed(shard.layout.shard(member).global_index) for member in range(fcp_round.degree)]
    plane_group = runtime.plane_group() if fcp_round.vision_over_round else None
    if plane_group is not None:
        layout = runtime.require_layout()
        vision = model.config.vision_config
        rows, anchor = encode_media_over_round(
            lambda p, g: _vision_rows(model, p, g), lambda: _stand_in_anchor(model),
            torch.cat(pixels) if pixels else None, items, merge_area, width, members_needed,
            fcp_round.rank_in_group, layout.plane.index(fcp_round.group_ranks[0]), layout.fcp_rank, plane_group,
            pixel_width=vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2,
            log=runtime.settings.log_plan)
    elif shard.group is None:
        rows, anchor = _vision_rows_or_anchor(model, pixels, items)
        rows = rows[needed(shard.global_index).to(rows.device)]
    else:
        rows, anchor = encode_media_in_group(
            lambda p, g: _vision_rows(model, p, g), lambda: _stand_in_anchor(model),
            torch.cat(pixels) if pixels else None, items, merge_area, width, members_needed,
            fcp_round.rank_in_group, shard.group, log=runtime.settings.log_plan)
    shard_ids = input_ids[:, index]
    embeds = model.get_input_embeddings()(shard_ids)  # [1, shard tokens, hidden]
    visual_mask = feature_rows[index].unsqueeze(0) >= 0  # [1, shard tokens]
    features, *deepstack = rows.split(model.config.vision_config.out_hidden_size, dim=-1)
    embeds = embeds.masked_scatter(visual_mask.unsqueeze(-1).expand_as(embeds), features.to(embeds.dtype))
    if anchor is not None:
        embeds = embeds + anchor.to(embeds.dtype)
    if rows.shape[0] == 0:
        # Keeps the backward pass of this rank's feature exchange (a collective of the group) in the graph.
        embeds = embeds + rows.sum().to(embeds.dtype)
        return embeds, visual_mask, None
    return embeds, visual_mask, deepstack


def _vision_rows_or_anchor(model: Any, pixels: list[torch.Tensor], items: list[Any]
                           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """All the round's vision rows on one rank, or, without media, no rows and the anchor of a stand-in call."""
    if items:
        return _vision_rows(model, torch.cat(pixels), torch.stack([item.grid for item in items])), None
    anchor = _stand_in_anchor(model)
    width = model.config.vision_config.out_hidden_size * (1 + len(model.visual.deepstack_visual_indexes))
    return anchor.new_zeros(0, width), anchor


def _shard_decoder_inputs(shard: TextShard, embeds: torch.Tensor, position_ids: torch.Tensor,
                          visual_mask: torch.Tensor, deepstack: list[torch.Tensor] | None) -> dict[str, Any]:
    index = shard.global_index.to(position_ids.device)
    inputs: dict[str, Any] = {"inputs_embeds": embeds, "position_ids": position_ids[..., index]}
    if deepstack is not None:
        inputs["visual_pos_masks"] = visual_mask
        inputs["deepstack_visual_embeds"] = deepstack
    # The decoder's own varlen bookkeeping covers the shard as one sequence; FCP's attention uses the
    # samples' boundaries over the whole group instead.
    inputs[SEQLENS_KEY] = torch.tensor([index.numel()], dtype=torch.int32)
    inputs["indices"] = torch.arange(index.numel(), device=embeds.device)
    return inputs


def model_forward_wrapper(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`Qwen3VLModel.forward`, inside an FCP round on this rank's shard of the group's packed samples."""
    signature = inspect.signature(forward)

    @functools.wraps(forward)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        extra = dict(bound.arguments.pop("kwargs", {}))
        shard = round_shard(extra.get(SEQLENS_KEY))
        if shard is None:
            return forward(self, *args, **kwargs)
        given = bound.arguments
        input_ids = given.get("input_ids")
        if input_ids is None or input_ids.shape[0] != 1 or given.get("inputs_embeds") is not None:
            raise FCPRuntimeError("FCP runs Qwen3-VL on the input ids of one packed sequence per round")
        if given.get("past_key_values") is not None:
            raise FCPRuntimeError("FCP trains without a key-value cache")
        embeds, visual_mask, deepstack = _shard_inputs(self, input_ids, given, shard)
        seqlens = extra.pop(SEQLENS_KEY)
        position_ids, rope_deltas = self.get_rope_index(
            input_ids, given.get("image_grid_thw"), given.get("video_grid_thw"), sequence_length=seqlens)
        decoder_inputs = _shard_decoder_inputs(shard, embeds, position_ids, visual_mask, deepstack)
        extra.pop("indices", None)
        run_text_decoder_on(shard)
        outputs = self.language_model(input_ids=None, attention_mask=None, past_key_values=None,
                                      cache_position=None, **decoder_inputs, **extra)
        from mindspeed_mm.models.transformers.qwen3vl.output import Qwen3VLModelOutputWithPast

        return Qwen3VLModelOutputWithPast(last_hidden_state=outputs.last_hidden_state, past_key_values=None,
                                          rope_deltas=rope_deltas)

    return run


def text_attention_forward_wrapper(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`Qwen3VLTextAttention.forward` attending over the round's group with FCP's ring, Ulysses or hybrid attention."""
    signature = inspect.signature(forward)

    @functools.wraps(forward)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        shard = active_shard()
        if shard is None:
            return forward(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        hidden_states = bound.arguments["hidden_states"]
        cos, sin = bound.arguments["position_embeddings"]
        if self.training and self.attention_dropout > 0:
            raise FCPRuntimeError("FCP's attention has no dropout: set the text model's attention_dropout to 0")
        from mindspeed_mm.models.transformers.qwen3vl.modules import apply_rotary_pos_emb

        batch, tokens = hidden_states.shape[:-1]
        heads_shape = (batch, tokens, -1, self.head_dim)
        query = self.q_norm(self.q_proj(hidden_states).view(heads_shape))
        key = self.k_norm(self.k_proj(hidden_states).view(heads_shape))
        value = self.v_proj(hidden_states).view(heads_shape)
        query, key = apply_rotary_pos_emb(query, key, cos, sin, unsqueeze_dim=2)
        output = fcp_attention(
            query[0], key[0], value[0], shard.cu_seqlens,
            group=shard.attention_group, algo=shard.fcp_round.algo, causal=True, softmax_scale=self.scaling,
            kernel=get_fcp_runtime().settings.attention_kernel,
        )
        return self.o_proj(output.reshape(batch, tokens, -1))

    return run
