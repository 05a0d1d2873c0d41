"""The Megatron functions FCP patches, each with the adapter that replaces or wraps it and why.

Targets in megatron-core are always registered. Targets in `megatron.training` (Megatron-LM's
training package, not part of megatron-core) and in `mindspeed` are registered only when those
packages are importable; their adapters are the same functions as the megatron-core ones.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_ADAPTERS = "mindspeed_mm.features_manager.fcp.adapters"
_MM = "mindspeed_mm.features_manager.fcp.mm"


@dataclass(frozen=True)
class FCPPatch:
    """One patch FCP registers."""

    target: str
    """Dotted name of the patched function or class."""
    adapter: str
    """`module:attribute` of the replacement (a name ending in `_wrapper` wraps the original)."""
    reason: str
    """Why FCP needs it."""
    requires: str = "megatron.core"
    """Package or module that must be importable for the patch to be registered."""

    def load_adapter(self) -> Any:
        """Imports the adapter object."""
        module, attribute = self.adapter.split(":")
        return getattr(importlib.import_module(module), attribute)


FCP_PATCHES: tuple[FCPPatch, ...] = (
    FCPPatch(
        "megatron.core.models.gpt.gpt_layer_specs.get_gpt_layer_local_spec",
        f"{_ADAPTERS}.layer_spec:get_gpt_layer_local_spec_wrapper",
        "core attention of every GPT layer becomes FCPCoreAttention, which runs ring or Ulysses attention over "
        "the round's group taken from packed_seq_params",
    ),
    FCPPatch(
        "megatron.core.models.gpt.gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec",
        f"{_ADAPTERS}.layer_spec:get_gpt_layer_with_transformer_engine_spec_wrapper",
        "the same for the Transformer Engine layer spec",
    ),
    FCPPatch(
        "megatron.core.models.common.embeddings.rotary_pos_embedding.RotaryEmbedding",
        f"{_ADAPTERS}.rotary:FCPRotaryEmbedding",
        "a zigzag shard holds non-consecutive positions of several documents: RoPE angles come from each "
        "token's own position id instead of a slice of 0..seq_len",
    ),
    FCPPatch(
        "megatron.core.parallel_state.initialize_model_parallel",
        f"{_ADAPTERS}.model_parallel:initialize_model_parallel_wrapper",
        "checks that Megatron builds no static CP groups (CP = 1), records the DP x CP planes FCP re-partitions "
        "and, with --fcp-group-pool prewarm, creates every group once",
    ),
    FCPPatch(
        "megatron.core.utils.get_batch_on_this_cp_rank",
        f"{_ADAPTERS}.batch:get_batch_on_this_cp_rank",
        "each rank keeps its per-document zigzag shard of its group's packed batch (the group and degree change "
        "every round) and gets the round's FCPPackedSeqParams",
    ),
    FCPPatch(
        "megatron.core.pipeline_parallel.schedules.get_forward_backward_func",
        f"{_ADAPTERS}.schedule:get_forward_backward_func_wrapper",
        "every step starts from its plan: the schedule runs one micro-batch per planned round and tells the "
        "batch function which round is running",
    ),
    FCPPatch(
        "megatron.training.utils.get_batch_on_this_cp_rank",
        f"{_ADAPTERS}.batch:get_batch_on_this_cp_rank",
        "Megatron-LM's training loop shards batches through its own copy of the function",
        requires="megatron.training",
    ),
    FCPPatch(
        "mindspeed.utils.get_batch_on_this_cp_rank",
        f"{_ADAPTERS}.batch:get_batch_on_this_cp_rank",
        "MindSpeed-MM entry scripts shard batches through MindSpeed's copy of the function",
        requires="mindspeed",
    ),
    FCPPatch(
        "mindspeed_mm.data.dataloader.dataloader.prepare_sampler_dataloader",
        f"{_MM}.data:prepare_sampler_dataloader_wrapper",
        "MindSpeed-MM's data loader: `sampler_type: FCPBatchSampler` plans every global batch from the dataset's "
        "token lengths and gives each rank its group's samples packed, round after round",
        requires="mindspeed_mm.data.dataloader.dataloader",
    ),
    FCPPatch(
        "mindspeed_mm.models.transformers.qwen3vl.modeling_qwen3_vl.Qwen3VLModel.forward",
        f"{_MM}.qwen3vl:model_forward_wrapper",
        "Qwen3-VL builds the round's packed samples whole (each image or video encoded by one member of the group, "
        "features gathered; one vision-tower call per round on every rank, as FSDP2 needs), then runs its text "
        "decoder on this rank's zigzag shard (embeddings, mRoPE ids, deepstack features)",
        requires="mindspeed_mm.models.transformers.qwen3vl.modeling_qwen3_vl",
    ),
    FCPPatch(
        "mindspeed_mm.models.transformers.qwen3vl.modules.Qwen3VLTextAttention.forward",
        f"{_MM}.qwen3vl:text_attention_forward_wrapper",
        "Qwen3-VL's text attention runs FCP's ring or Ulysses attention over the round's group",
        requires="mindspeed_mm.models.transformers.qwen3vl.modules",
    ),
    FCPPatch(
        "mindspeed_mm.models.transformers_model.TransformersModel.build_loss_ctx",
        f"{_MM}.loss:build_loss_ctx_wrapper",
        "the loss of a round's shard is weighted so that the step's loss and gradients are those of the global "
        "batch on one device (model.loss_cfg semantics)",
        requires="mindspeed_mm.models.transformers_model",
    ),
)
"""Every patch of the FCP feature, in registration order."""


def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def active_patches() -> list[FCPPatch]:
    """The patches whose package is importable here."""
    return [patch for patch in FCP_PATCHES if _importable(patch.requires)]


def register_fcp_patches(patch_manager: Any, args: argparse.Namespace) -> list[FCPPatch]:
    """Configures the FCP runtime from `args` and registers the active patches; returns them."""
    from mindspeed_mm_fcp.feature import fcp_ranks

    from .runtime import FCPRuntimeSettings, reset_fcp_runtime

    reset_fcp_runtime(FCPRuntimeSettings(group_pool=args.fcp_group_pool, max_degree=args.fcp_max_degree,
                                         comm_timeout_s=args.fcp_comm_timeout_s,
                                         attention_kernel=args.fcp_attention_kernel))
    patches = active_patches()
    for patch in patches:
        patch_manager.register_patch(patch.target, patch.load_adapter())
    logger.info("FCP: context_parallel_algo=fcp_cp_algo on %d ranks, max degree %s, cost source %s; patched %s",
                fcp_ranks(args), args.fcp_max_degree or "all", args.fcp_profile_table or args.fcp_preset,
                ", ".join(patch.target for patch in patches))
    skipped = [patch.target for patch in FCP_PATCHES if patch not in patches]
    if skipped:
        logger.info("FCP: not patching %s (package not importable)", ", ".join(skipped))
    return patches
