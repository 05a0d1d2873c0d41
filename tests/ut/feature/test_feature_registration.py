"""Registration and the MindSpeed flow, stage by stage as MindSpeed runs it.

1. ``import mindspeed_mm_fcp.register`` (the entry script's one line) adds FCPFeature to the features list.
2. The adaptor: every feature registers its flags, MindSpeed parses the command line with
   ``parse_known_args`` and keeps every flag it does not know as a **string**, then runs the enabled
   features' ``pre_register_patches`` and ``register_patches`` on those values.
3. Megatron's parse: every feature registers again, the full typed arguments go through
   ``pre_validate_args``, Megatron's own validation, ``post_validate_args`` and ``validate_args``.

In the plain session these run against the fallback classes; in the upstream session (MindSpeed on the
path) against MindSpeed's own features manager, feature base and patch manager.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator

import pytest
from mindspeed_managers import EXPECT_MINDSPEED, registered_targets

from mindspeed_mm.features_manager.fcp.runtime import reset_fcp_runtime
from mindspeed_mm_fcp.feature import FCPFeature
from mindspeed_mm_fcp.mindspeed_compat import (
    USING_MINDSPEED,
    MindSpeedFeature,
    MindSpeedFeaturesManager,
    MindSpeedPatchesManager,
)
from mindspeed_mm_fcp.options import FCPOptionError
from mindspeed_mm_fcp.register import add_fcp_feature, enable_fcp


class StaticCPFeature(MindSpeedFeature):
    """Stands for MindSpeed's ContextParallelFeature: registers --context-parallel-algo and, with a CP size
    above 1 (read from the string MindSpeed's first parse keeps), replaces get_batch_on_this_cp_rank."""

    def __init__(self) -> None:
        super().__init__("context-parallel-size")

    def is_need_apply(self, args) -> bool:
        return True

    def register_args(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--context-parallel-algo", type=str, default="megatron_cp_algo",
                            choices=["megatron_cp_algo", "ulysses_cp_algo", "hybrid_cp_algo"])

    def register_patches(self, patch_manager, args) -> None:
        if int(getattr(args, "context_parallel_size", 1)) > 1:
            patch_manager.register_patch("megatron.core.utils.get_batch_on_this_cp_rank", lambda batch: batch)


@pytest.fixture()
def features() -> Iterator[list[MindSpeedFeature]]:
    saved = list(MindSpeedFeaturesManager.FEATURES_LIST)
    MindSpeedFeaturesManager.FEATURES_LIST[:] = [StaticCPFeature()]
    try:
        yield MindSpeedFeaturesManager.FEATURES_LIST
    finally:
        MindSpeedPatchesManager.remove_patches()
        MindSpeedPatchesManager.patches_info.clear()  # MindSpeed keeps emptied entries that remember originals
        MindSpeedFeaturesManager.FEATURES_LIST[:] = saved
        reset_fcp_runtime()


def adaptor_stage(argv: list[str]) -> argparse.Namespace:
    """What ``import mindspeed.megatron_adaptor`` does with the features list."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    MindSpeedFeaturesManager.register_features_args(parser)
    known, unknown = parser.parse_known_args(argv)
    values = vars(known)
    key = None
    for token in unknown:  # MindSpeed keeps unknown flags as strings (`--flag` alone: True)
        if token.startswith("--"):
            flag, _, value = token.partition("=")
            key = flag[2:].replace("-", "_")
            values[key] = value if value else True
        else:
            values[key] = token
    args = argparse.Namespace(**values)
    MindSpeedFeaturesManager.apply_features_pre_patches(args)
    MindSpeedFeaturesManager.apply_features_patches(args)
    return args


def megatron_stage(argv: list[str], world_size: int = 4) -> argparse.Namespace:
    """Megatron's parse and validation with MindSpeed's feature hooks around it."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for flag in ("--context-parallel-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--micro-batch-size"):
        parser.add_argument(flag, type=int, default=1)
    parser.add_argument("--num-attention-heads", type=int, default=4)
    parser.add_argument("--distributed-timeout-minutes", type=int, default=10)  # Megatron's flag and default
    parser.add_argument("--calculate-per-token-loss", action="store_true")
    MindSpeedFeaturesManager.register_features_args(parser)
    args = parser.parse_args(argv)
    args.world_size = world_size
    MindSpeedFeaturesManager.pre_validate_features_args(args)
    MindSpeedFeaturesManager.post_validate_features_args(args)
    MindSpeedFeaturesManager.validate_features_args(args)
    return args


def run_both_stages(argv: list[str]) -> argparse.Namespace:
    adaptor_stage(argv)
    return megatron_stage(argv)


FCP_ARGV = ["--context-parallel-algo", "fcp_cp_algo", "--calculate-per-token-loss", "--fcp-preset", "cpu-tiny",
            "--fcp-max-degree", "4", "--micro-batch-size=1"]


def test_the_session_uses_the_expected_mindspeed() -> None:
    """The upstream session must really run against MindSpeed, the plain one against the fallback."""
    assert USING_MINDSPEED == EXPECT_MINDSPEED


def test_add_fcp_feature_appends_once() -> None:
    features: list[MindSpeedFeature] = [StaticCPFeature()]
    assert add_fcp_feature(features) is features
    add_fcp_feature(features)
    assert [type(f) for f in features] == [StaticCPFeature, FCPFeature]


def test_enable_fcp_needs_a_features_list() -> None:
    with pytest.raises(TypeError, match="FEATURES_LIST"):
        enable_fcp(object())


def test_the_import_line_registers_fcp_last(features: list[MindSpeedFeature]) -> None:
    sys.modules.pop("mindspeed_mm_fcp.register", None)
    importlib.import_module("mindspeed_mm_fcp.register")
    assert [type(f) for f in features] == [StaticCPFeature, FCPFeature]


def test_the_import_line_imports_nothing_of_mindspeed_mm() -> None:
    """MindSpeed-MM's package may only be imported after the adaptor: the registration must not pull it in."""
    import subprocess

    code = ("import sys; import mindspeed_mm_fcp.register; "
            "print(sorted(m for m in sys.modules if m == 'mindspeed_mm' or m.startswith('mindspeed_mm.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_fcp_is_validated_on_typed_args_and_patched_once(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    pre_parsed = adaptor_stage(FCP_ARGV)
    assert pre_parsed.micro_batch_size == "1", "MindSpeed's first parse keeps Megatron's flags as strings"
    assert not registered_targets(MindSpeedPatchesManager), "FCP patches only after Megatron's validation"
    args = megatron_stage(FCP_ARGV)
    assert args.fcp_max_degree == 4
    patched = registered_targets(MindSpeedPatchesManager)
    assert "megatron.core.parallel_state.initialize_model_parallel" in patched
    MindSpeedFeaturesManager.validate_features_args(args)  # hooks run again (MindSpeed does): no second patch
    assert registered_targets(MindSpeedPatchesManager) == patched


def test_runs_without_fcp_are_untouched(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    args = run_both_stages(["--context-parallel-algo", "ulysses_cp_algo", "--context-parallel-size", "2"])
    assert args.context_parallel_size == 2
    assert registered_targets(MindSpeedPatchesManager) == {"megatron.core.utils.get_batch_on_this_cp_rank"}
    assert args.distributed_timeout_minutes == 10


@pytest.mark.parametrize("extra", [[], ["--fcp-comm-timeout-s", "90"], ["--distributed-timeout-minutes", "3"]])
def test_megatrons_timeout_is_left_as_the_run_sets_it(features: list[MindSpeedFeature], extra: list[str]) -> None:
    enable_fcp()
    args = run_both_stages([*FCP_ARGV, *extra])
    assert args.distributed_timeout_minutes == (3 if "--distributed-timeout-minutes" in extra else 10)
    assert args.fcp_comm_timeout_s == (90.0 if "--fcp-comm-timeout-s" in extra else 300.0)


def test_a_static_cp_size_is_refused_in_the_adaptor_naming_the_key(features: list[MindSpeedFeature]) -> None:
    """With CP > 1 MindSpeed's CP feature patches for static CP; FCP stops before that can conflict."""
    enable_fcp()
    with pytest.raises(FCPOptionError, match=r"--context-parallel-size=2 \(YAML key context_parallel_size\)"):
        adaptor_stage([*FCP_ARGV, "--context-parallel-size", "2"])


def test_a_micro_batch_above_one_is_refused_from_the_string_value(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    with pytest.raises(FCPOptionError, match="--micro-batch-size=2"):
        adaptor_stage([*FCP_ARGV, "--micro-batch-size=2"])


def test_an_unparsable_megatron_value_is_named(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    with pytest.raises(FCPOptionError, match="--micro-batch-size: expected an integer, got 'one'"):
        adaptor_stage([*FCP_ARGV, "--micro-batch-size=one"])


def test_invalid_fcp_options_stop_before_any_fcp_patch(features: list[MindSpeedFeature]) -> None:
    enable_fcp()
    argv = [*FCP_ARGV, "--fcp-max-degree", "5"]
    adaptor_stage(argv)
    with pytest.raises(FCPOptionError, match="--fcp-max-degree=5 exceeds the 4"):
        megatron_stage(argv)
    assert not registered_targets(MindSpeedPatchesManager)


def test_transformer_configs_are_not_validated_as_arguments(features: list[MindSpeedFeature]) -> None:
    """MindSpeed runs the validation hooks on every TransformerConfig too; FCP checks the arguments only."""
    enable_fcp()

    class Config:  # a config object carrying the run's options, as MindSpeed's config wrapper makes it
        context_parallel_algo = "fcp_cp_algo"
        fcp_max_degree = 99

    MindSpeedFeaturesManager.validate_features_args(Config())
    assert not registered_targets(MindSpeedPatchesManager)


def test_an_installed_mindspeed_that_fails_to_import_is_an_error_not_the_fallback(tmp_path) -> None:
    """MindSpeed present but broken (here: torch_npu missing) must not silently train with the stand-ins."""
    import os
    import subprocess

    package = tmp_path / "mindspeed"
    (package / "features_manager").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "features_manager" / "__init__.py").write_text("import torch_npu_that_is_not_installed\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-c", "import mindspeed_mm_fcp.mindspeed_compat"], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "No module named 'torch_npu_that_is_not_installed'" in done.stderr
