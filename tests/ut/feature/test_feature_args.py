"""FCPFeature argument registration, the way MindSpeed builds its parser."""
import argparse

import pytest

from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm_fcp.mindspeed_compat import MindSpeedFeature


def megatron_like_parser(with_cp_algo: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--context-parallel-size", type=int, default=1)
    parser.add_argument("--tensor-model-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    if with_cp_algo:
        parser.add_argument("--context-parallel-algo", type=str, default="megatron_cp_algo",
                            choices=["megatron_cp_algo", "ulysses_cp_algo", "hybrid_cp_algo"])
    return parser


def test_fcp_choice_added_to_existing_option():
    parser = megatron_like_parser()
    FCPFeature().register_args(parser)
    args = parser.parse_args(["--context-parallel-algo", "fcp_cp_algo"])
    assert args.context_parallel_algo == "fcp_cp_algo"
    # the existing choices are kept
    assert parser.parse_args(["--context-parallel-algo", "ulysses_cp_algo"]).context_parallel_algo == "ulysses_cp_algo"


def test_option_registered_when_no_cp_feature_did():
    parser = megatron_like_parser(with_cp_algo=False)
    FCPFeature().register_args(parser)
    assert parser.parse_args(["--context-parallel-algo", "fcp_cp_algo"]).context_parallel_algo == "fcp_cp_algo"


def test_add_choice_is_a_no_op_for_unknown_option():
    parser = megatron_like_parser(with_cp_algo=False)
    MindSpeedFeature.add_parser_argument_choices_value(parser, "--context-parallel-algo", "fcp_cp_algo")
    with pytest.raises(SystemExit):
        parser.parse_args(["--context-parallel-algo", "fcp_cp_algo"])


def test_defaults():
    parser = megatron_like_parser()
    FCPFeature().register_args(parser)
    args = parser.parse_args([])
    assert args.fcp_profile_table is None
    assert args.fcp_preset is None
    assert args.fcp_max_degree is None
    assert args.fcp_max_tokens_per_rank is None
    assert args.fcp_attention_algo == "auto"
    assert args.fcp_async_planning is True
    assert args.fcp_group_pool == "lazy"
    assert args.fcp_ranks_per_node is None
    assert args.fcp_log_plan is False
    assert args.fcp_recalibrate is True
    assert args.fcp_recalibration_smoothing == 0.3
    assert args.fcp_comm_timeout_s == 300.0


def test_flag_values_parse():
    parser = megatron_like_parser()
    FCPFeature().register_args(parser)
    args = parser.parse_args([
        "--context-parallel-algo", "fcp_cp_algo", "--fcp-max-degree", "6", "--fcp-attention-algo", "ulysses",
        "--fcp-async-planning", "false", "--fcp-group-pool", "prewarm", "--fcp-log-plan",
        "--fcp-max-tokens-per-rank", "4096", "--fcp-ranks-per-node", "16", "--fcp-recalibrate", "off",
        "--fcp-recalibration-smoothing", "0.5", "--fcp-comm-timeout-s", "20",
    ])
    assert args.fcp_comm_timeout_s == 20.0
    assert (args.fcp_recalibrate, args.fcp_recalibration_smoothing) == (False, 0.5)
    assert (args.fcp_max_degree, args.fcp_attention_algo, args.fcp_async_planning) == (6, "ulysses", False)
    assert (args.fcp_group_pool, args.fcp_log_plan) == ("prewarm", True)
    assert (args.fcp_max_tokens_per_rank, args.fcp_ranks_per_node) == (4096, 16)


@pytest.mark.parametrize("argv", [
    ["--fcp-attention-algo", "hybrid"],
    ["--fcp-group-pool", "eager"],
    ["--fcp-max-degree", "0"],
    ["--fcp-max-degree", "three"],
    ["--fcp-async-planning", "maybe"],
    ["--fcp-recalibration-smoothing", "0"],
    ["--fcp-recalibration-smoothing", "1.5"],
    ["--fcp-comm-timeout-s", "0"],
    ["--fcp-comm-timeout-s", "inf"],
])
def test_bad_values_name_the_option(argv, capsys):
    parser = megatron_like_parser()
    FCPFeature().register_args(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    assert argv[0] in capsys.readouterr().err


def test_is_need_apply_only_for_fcp():
    feature = FCPFeature()
    assert feature.is_need_apply(argparse.Namespace(context_parallel_algo="fcp_cp_algo"))
    assert not feature.is_need_apply(argparse.Namespace(context_parallel_algo="ulysses_cp_algo"))
    assert not feature.is_need_apply(argparse.Namespace())
