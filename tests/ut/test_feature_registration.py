"""Registration entry and the MindSpeed flow: register args, validate, patch, from the one import line."""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator

import pytest
from megatron.core.models.gpt import gpt_layer_specs

from mindspeed_mm.core.fcp.executor.attention import FCPCoreAttention
from mindspeed_mm.features_manager import add_fcp_feature, enable_fcp
from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.mindspeed_compat import USING_MINDSPEED, MindSpeedFeature
from mindspeed_mm.features_manager.fcp.mindspeed_fallback import MindSpeedFeaturesManager, MindSpeedPatchesManager
from mindspeed_mm.features_manager.fcp.runtime import reset_fcp_runtime
from mindspeed_mm.features_manager.fcp.validation import FCPArgumentError


class OtherFeature(MindSpeedFeature):
    def __init__(self) -> None:
        super().__init__("other-feature")


@pytest.fixture()
def features() -> Iterator[list[MindSpeedFeature]]:
    saved = list(MindSpeedFeaturesManager.FEATURES_LIST)
    MindSpeedFeaturesManager.FEATURES_LIST[:] = [OtherFeature()]
    try:
        yield MindSpeedFeaturesManager.FEATURES_LIST
    finally:
        MindSpeedFeaturesManager.remove_patches()
        MindSpeedFeaturesManager.FEATURES_LIST[:] = saved
        reset_fcp_runtime()


def megatron_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for flag in ("--context-parallel-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--micro-batch-size"):
        parser.add_argument(flag, type=int, default=1)
    parser.add_argument("--num-attention-heads", type=int, default=4)
    parser.add_argument("--calculate-per-token-loss", action="store_true")
    parser.add_argument("--context-parallel-algo", default="megatron_cp_algo",
                        choices=["megatron_cp_algo", "ulysses_cp_algo", "hybrid_cp_algo"])
    return parser


def run_mindspeed_flow(argv: list[str]) -> argparse.Namespace:
    """What MindSpeed does: every feature registers arguments and validates, enabled features patch."""
    parser = megatron_parser()
    MindSpeedFeaturesManager.register_features_args(parser)
    args = parser.parse_args(argv)
    args.world_size = 4
    MindSpeedFeaturesManager.pre_validate_features_args(args)
    MindSpeedFeaturesManager.validate_features_args(args)
    MindSpeedFeaturesManager.post_validate_features_args(args)
    MindSpeedFeaturesManager.apply_features_patches(args)
    return args


def test_add_fcp_feature_appends_once() -> None:
    features: list[MindSpeedFeature] = [OtherFeature()]
    assert add_fcp_feature(features) is features
    add_fcp_feature(features)
    assert [type(f) for f in features] == [OtherFeature, FCPFeature]


def test_enable_fcp_needs_a_features_list() -> None:
    with pytest.raises(TypeError, match="FEATURES_LIST"):
        enable_fcp(object())


def test_the_import_line_registers_fcp_with_the_features_manager(features: list[MindSpeedFeature]) -> None:
    assert not USING_MINDSPEED
    sys.modules.pop("mindspeed_mm.features_manager.register_fcp", None)
    importlib.import_module("mindspeed_mm.features_manager.register_fcp")
    assert [type(f) for f in features] == [OtherFeature, FCPFeature]


def test_fcp_run_through_the_manager_is_validated_and_patched(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    args = run_mindspeed_flow(["--context-parallel-algo", "fcp_cp_algo", "--context-parallel-size", "2",
                               "--calculate-per-token-loss", "--fcp-preset", "cpu-tiny", "--fcp-max-degree", "4"])
    assert (args.context_parallel_size, args.fcp_static_context_parallel_size) == (1, 2)
    spec = gpt_layer_specs.get_gpt_layer_local_spec()
    assert spec.submodules.self_attention.submodules.core_attention is FCPCoreAttention


def test_runs_without_fcp_are_untouched(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    args = run_mindspeed_flow(["--context-parallel-algo", "ulysses_cp_algo", "--context-parallel-size", "2"])
    assert args.context_parallel_size == 2
    assert MindSpeedPatchesManager.patches_info == {}


def test_invalid_fcp_options_stop_before_any_patch(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    with pytest.raises(FCPArgumentError, match="--fcp-max-degree=5 exceeds the 4"):
        run_mindspeed_flow(["--context-parallel-algo", "fcp_cp_algo", "--calculate-per-token-loss",
                            "--fcp-preset", "cpu-tiny", "--fcp-max-degree", "5"])
    assert MindSpeedPatchesManager.patches_info == {}
