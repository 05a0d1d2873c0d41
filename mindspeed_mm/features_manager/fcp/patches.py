"""The functions FCP patches on MindSpeed-MM's `pretrain_transformers.py` path, each with what replaces or wraps it
and why.

Three Megatron functions every MindSpeed-MM entry script runs through (`megatron/`: model-parallel initialisation,
the forward-backward schedule, checkpoint saving), two of MindSpeed-MM's whatever the model (its sampler data
loader, `TransformersModel`'s loss), and the model's own, which its adapter lists (`model_adapter`, registered by
the recipe's `model.model_id`). A patch is registered only where its target's package is importable.
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
_FEATURE = "mindspeed_mm.features_manager.fcp"


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
        f"{_FEATURE}.data_loader:prepare_sampler_dataloader_wrapper",
        "MindSpeed-MM's data loader: `sampler_type: FCPBatchSampler` plans every global batch from the dataset's "
        "token lengths and gives each rank its group's samples packed, round after round",
        requires="mindspeed_mm.data.dataloader.dataloader",
    ),
    FCPPatch(
        "mindspeed_mm.models.transformers_model.TransformersModel.build_loss_ctx",
        f"{_FEATURE}.loss:build_loss_ctx_wrapper",
        "the loss of a round's shard is weighted so that the step's loss and gradients are those of the global "
        "batch on one device (model.loss_cfg semantics)",
        requires="mindspeed_mm.models.transformers_model",
    ),
)
"""The patches of the FCP feature whatever the model, in registration order."""


def run_patches(args: argparse.Namespace) -> list[FCPPatch]:
    """Every patch of the run: the feature's, then those of its model's adapter (the recipe's `model.model_id`;
    an entry script that passes no recipe gets every adapter's, once per target)."""
    from .model_adapter import MODEL_ADAPTERS, adapter_for
    from .run_checks import recipe_model_id

    model_id = recipe_model_id(args)
    adapters = [adapter_for(model_id)] if model_id is not None else [adapter_for(m) for m in MODEL_ADAPTERS]
    patches = list(FCP_PATCHES)
    for adapter in adapters:
        patches.extend(patch for patch in adapter.patches if patch.target not in {p.target for p in patches})
    return patches


def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def active_patches(patches: list[FCPPatch] | tuple[FCPPatch, ...] = FCP_PATCHES) -> list[FCPPatch]:
    """Those of `patches` whose package is importable here."""
    return [patch for patch in patches if _importable(patch.requires)]


def register_fcp_patches(patch_manager: Any, args: argparse.Namespace) -> list[FCPPatch]:
    """Configures the FCP runtime from `args` and registers the run's active patches; returns them."""
    from mindspeed_mm_fcp.parallel_layout import fcp_ranks

    from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions

    from .cost_source import run_expert_parallel
    from .runtime import reset_fcp_runtime

    reset_fcp_runtime(FCPOptions.from_namespace(args).runtime_settings(expert_parallel=run_expert_parallel(args)))
    every = run_patches(args)
    patches = active_patches(every)
    for patch in patches:
        patch_manager.register_patch(patch.target, patch.load_adapter())
    logger.info("FCP: context_parallel_algo=fcp_cp_algo on %d ranks, max degree %s, cost source %s; patched %s",
                fcp_ranks(args), args.fcp_max_degree or "all", args.fcp_profile_table or args.fcp_preset,
                ", ".join(patch.target for patch in patches))
    skipped = [patch.target for patch in every if patch not in patches]
    if skipped:
        logger.info("FCP: not patching %s (package not importable)", ", ".join(skipped))
    return patches
