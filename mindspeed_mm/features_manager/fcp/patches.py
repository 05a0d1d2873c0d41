"""The functions FCP patches on MindSpeed-MM's Qwen3-VL path, each with the adapter that replaces or wraps it and why.

Two Megatron functions that every MindSpeed-MM entry script runs through (`megatron/`: model-parallel
initialisation, the forward-backward schedule) and four MindSpeed-MM functions of the Qwen3-VL model
(`qwen3vl/`). A patch is registered only where its target's package is importable.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_MEGATRON = "mindspeed_mm.features_manager.fcp.megatron"
_QWEN3VL = "mindspeed_mm.features_manager.fcp.qwen3vl"


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
        "megatron.core.parallel_state.initialize_model_parallel",
        f"{_MEGATRON}.model_parallel:initialize_model_parallel_wrapper",
        "checks that Megatron builds no static CP groups (CP = 1), records the DP x CP planes FCP re-partitions "
        "and, with --fcp-group-pool prewarm, creates every group once",
    ),
    FCPPatch(
        "megatron.core.pipeline_parallel.schedules.get_forward_backward_func",
        f"{_MEGATRON}.schedule:get_forward_backward_func_wrapper",
        "every step starts from its plan: the schedule runs one micro-batch per planned round and tells the "
        "batch function which round is running",
    ),
    FCPPatch(
        "megatron.training.checkpointing.save_checkpoint",
        f"{_MEGATRON}.checkpoint:save_checkpoint_wrapper",
        "FCP's state (steps done, calibration) is saved next to every checkpoint, so that a resumed run plans "
        "as the uninterrupted one",
        requires="megatron.training.checkpointing",
    ),
    FCPPatch(
        "mindspeed_mm.data.dataloader.dataloader.prepare_sampler_dataloader",
        f"{_QWEN3VL}.data:prepare_sampler_dataloader_wrapper",
        "MindSpeed-MM's data loader: `sampler_type: FCPBatchSampler` plans every global batch from the dataset's "
        "token lengths and gives each rank its group's samples packed, round after round",
        requires="mindspeed_mm.data.dataloader.dataloader",
    ),
    FCPPatch(
        "mindspeed_mm.models.transformers.qwen3vl.modeling_qwen3_vl.Qwen3VLModel.forward",
        f"{_QWEN3VL}.modeling:model_forward_wrapper",
        "Qwen3-VL builds the round's packed samples whole (each image or video encoded by one member of the group, "
        "features gathered; one vision-tower call per round on every rank, as FSDP2 needs), then runs its text "
        "decoder on this rank's zigzag shard (embeddings, mRoPE ids, deepstack features)",
        requires="mindspeed_mm.models.transformers.qwen3vl.modeling_qwen3_vl",
    ),
    FCPPatch(
        "mindspeed_mm.models.transformers.qwen3vl.modules.Qwen3VLTextAttention.forward",
        f"{_QWEN3VL}.modeling:text_attention_forward_wrapper",
        "Qwen3-VL's text attention runs FCP's ring or Ulysses attention over the round's group",
        requires="mindspeed_mm.models.transformers.qwen3vl.modules",
    ),
    FCPPatch(
        "mindspeed_mm.models.transformers_model.TransformersModel.build_loss_ctx",
        f"{_QWEN3VL}.loss:build_loss_ctx_wrapper",
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
    from mindspeed_mm_fcp.parallel_layout import fcp_ranks

    from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions

    from .runtime import reset_fcp_runtime

    reset_fcp_runtime(FCPOptions.from_namespace(args).runtime_settings())
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
