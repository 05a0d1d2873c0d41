"""FCPFeature's patches (registered in its validate_args hook): the exact registrations, and the Megatron patches applied for real.

Patched functions are exercised on one CPU process, then every patch is removed again so that the
other tests see stock megatron-core.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pytest
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.pipeline_parallel import schedules

from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.megatron import model_parallel, schedule
from mindspeed_mm_fcp.mindspeed_compat import MindSpeedPatchesManager
from mindspeed_mm.features_manager.fcp.model_adapter import adapter_for
from mindspeed_mm.features_manager.fcp.patches import FCP_PATCHES, active_patches, run_patches
from mindspeed_mm.features_manager.fcp.runtime import get_fcp_runtime, reset_fcp_runtime
from mindspeed_mm.features_manager.fcp.validation import FCPArgumentError

STOCK = {
    "initialize": parallel_state.initialize_model_parallel,
    "schedule": schedules.get_forward_backward_func,
}

EXPECTED_MEGATRON_CORE_PATCHES = {
    "megatron.core.parallel_state.initialize_model_parallel": model_parallel.initialize_model_parallel_wrapper,
    "megatron.core.pipeline_parallel.schedules.get_forward_backward_func":
        schedule.get_forward_backward_func_wrapper,
}


class RecordingPatchManager:
    """Records registrations instead of patching."""

    def __init__(self) -> None:
        self.registered: dict[str, Any] = {}

    def register_patch(self, target: str, new_obj: Any, force_patch: bool = False) -> None:
        assert target not in self.registered, f"{target} registered twice"
        self.registered[target] = new_obj

    def apply_patches(self) -> None:
        pass


def patch_through_the_hooks(manager: Any, args: argparse.Namespace) -> None:
    """The adaptor hands the feature its patch manager; Megatron's validation makes it patch."""
    feature = FCPFeature()
    feature.register_patches(manager, args)
    feature.validate_args(args)


def fcp_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--context-parallel-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
        parser.add_argument(flag, type=int, default=1)
    parser.add_argument("--num-attention-heads", type=int, default=4)
    FCPFeature().register_args(parser)
    args = parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", *argv])
    args.world_size = 1
    return args


@pytest.fixture()
def one_process_world() -> Iterator[None]:
    """A one-process gloo world without megatron-core model-parallel state."""
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    parallel_state.destroy_model_parallel()
    yield
    parallel_state.destroy_model_parallel()
    if created:
        dist.destroy_process_group()


@pytest.fixture()
def applied_patches() -> Iterator[None]:
    """The FCP feature's patches applied through the patch manager; removed afterwards."""
    MindSpeedPatchesManager.patches_info.clear()
    try:
        patch_through_the_hooks(MindSpeedPatchesManager, fcp_args("--fcp-preset", "cpu-tiny"))
        yield
    finally:
        MindSpeedPatchesManager.remove_patches()
        MindSpeedPatchesManager.patches_info.clear()  # MindSpeed keeps emptied entries that remember originals
        reset_fcp_runtime()


def test_exact_registrations() -> None:
    manager = RecordingPatchManager()
    patch_through_the_hooks(manager, fcp_args("--fcp-preset", "cpu-tiny"))
    assert {p.requires for p in active_patches()} == {"megatron.core"}
    assert manager.registered == EXPECTED_MEGATRON_CORE_PATCHES
    assert [p.target for p in FCP_PATCHES if p.requires != "megatron.core"] == [
        "megatron.training.checkpointing.save_checkpoint",
        "mindspeed_mm.data.dataloader.dataloader.prepare_sampler_dataloader",
        "mindspeed_mm.models.transformers_model.TransformersModel.build_loss_ctx",
    ]
    # the model's own patches come from its adapter; without a recipe, every adapter's (one per target)
    model_targets = [
        "mindspeed_mm.models.transformers.qwen3vl.modeling_qwen3_vl.Qwen3VLModel.forward",
        "mindspeed_mm.models.transformers.qwen3vl.modules.Qwen3VLTextAttention.forward",
    ]
    every = run_patches(fcp_args("--fcp-preset", "cpu-tiny"))
    assert [p.target for p in every] == [p.target for p in FCP_PATCHES] + model_targets
    for model_id in ("qwen3_vl", "qwen3_vl_moe"):
        assert [p.target for p in adapter_for(model_id).patches] == model_targets
    # Megatron-LM's training package and MindSpeed-MM's modules are not importable here: not registered
    assert all(p not in active_patches(every) for p in every[2:])
    # every adapter loads (the Qwen3-VL ones import nothing of MindSpeed-MM at module level)
    assert all(callable(p.load_adapter()) for p in every)


def test_registration_configures_the_runtime() -> None:
    patch_through_the_hooks(RecordingPatchManager(), fcp_args(
        "--fcp-preset", "cpu-tiny", "--fcp-group-pool", "prewarm", "--fcp-max-degree", "1",
        "--fcp-comm-timeout-s", "7.5"))
    settings = get_fcp_runtime().settings
    assert (settings.group_pool, settings.max_degree, settings.comm_timeout_s) == ("prewarm", 1, 7.5)
    reset_fcp_runtime()


def test_invalid_arguments_register_nothing() -> None:
    manager = RecordingPatchManager()
    with pytest.raises(FCPArgumentError, match="--fcp-preset"):
        patch_through_the_hooks(manager, fcp_args("--fcp-preset", "no-such-preset"))
    assert manager.registered == {}


def test_patches_are_removed_again(applied_patches: None) -> None:
    MindSpeedPatchesManager.remove_patches()
    assert parallel_state.initialize_model_parallel is STOCK["initialize"]
    assert schedules.get_forward_backward_func is STOCK["schedule"]


def test_model_parallel_patch_records_layout_and_refuses_static_cp(
    one_process_world: None, applied_patches: None
) -> None:
    with pytest.raises(ValueError, match="context_parallel_size=2"):
        parallel_state.initialize_model_parallel(context_parallel_size=2)
    assert not parallel_state.model_parallel_is_initialized()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
    layout = get_fcp_runtime().require_layout()
    assert (layout.planes, layout.fcp_rank, layout.num_fcp_ranks) == (((0,),), 0, 1)


def test_schedule_patch_returns_the_fcp_driver(one_process_world: None, applied_patches: None) -> None:
    parallel_state.initialize_model_parallel()
    driver = schedules.get_forward_backward_func()
    assert driver.__wrapped__ is schedules.forward_backward_no_pipelining
    assert driver is not schedules.forward_backward_no_pipelining
