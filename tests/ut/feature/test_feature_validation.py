"""FCPFeature.validate_args: one test per rule, each error naming its flag."""
import argparse
import dataclasses
import json

import pytest

from mindspeed_mm.core.fcp.cost import preset_table
from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.validation import FCPArgumentError, validate_fcp_args


def parse(*argv: str, world_size: int = 8) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--context-parallel-size", type=int, default=1)
    parser.add_argument("--tensor-model-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-attention-heads", type=int, default=4)
    parser.add_argument("--group-query-attention", action="store_true")
    parser.add_argument("--num-query-groups", type=int, default=2)
    parser.add_argument("--use-cp-send-recv-overlap", action="store_true")
    FCPFeature().register_args(parser)
    args = parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", *argv])
    args.world_size = world_size
    return args


QWEN3VL_8B = ("--num-layers", "36", "--hidden-size", "4096", "--num-attention-heads", "32")
"""The LLM dimensions of Qwen3-VL-8B, as MindSpeed-MM's recipe gives them to Megatron."""


@pytest.fixture()
def tiny_table(tmp_path):
    path = tmp_path / "tiny.json"
    preset_table("cpu-tiny").save(path)
    return path


def test_valid_preset_passes():
    args = parse("--fcp-preset", "a3-qwen3vl-8b", *QWEN3VL_8B, "--fcp-max-degree", "8")
    validate_fcp_args(args)
    assert (args.context_parallel_size, args.fcp_max_degree) == (1, 8)


def test_a_static_cp_size_is_refused_naming_the_yaml_key():
    with pytest.raises(FCPArgumentError, match=r"--context-parallel-size=4 \(YAML key context_parallel_size\)"):
        validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--context-parallel-size", "4"))


def test_string_values_from_another_parser_are_checked_and_typed():
    """MindSpeed's first parse keeps unknown flags as strings: validation types them with the same checks."""
    args = parse("--fcp-preset", "cpu-tiny")
    args.fcp_max_degree, args.fcp_log_plan = "4", "true"
    validate_fcp_args(args)
    assert (args.fcp_max_degree, args.fcp_log_plan) == (4, True)
    args.fcp_max_degree = "four"
    with pytest.raises(FCPArgumentError, match="--fcp-max-degree: expected a positive integer, got 'four'"):
        validate_fcp_args(args)


def test_valid_table_passes(tiny_table):
    validate_fcp_args(parse("--fcp-profile-table", str(tiny_table), "--group-query-attention"))


def test_missing_cost_source_names_both_flags():
    with pytest.raises(FCPArgumentError, match="--fcp-profile-table.*--fcp-preset"):
        validate_fcp_args(parse())


def test_unknown_preset_lists_choices():
    with pytest.raises(FCPArgumentError, match=r"--fcp-preset='b9-unknown'.*a3-qwen3vl-8b"):
        validate_fcp_args(parse("--fcp-preset", "b9-unknown"))


def test_missing_table_file(tmp_path):
    with pytest.raises(FCPArgumentError, match="--fcp-profile-table: file .*nope.json"):
        validate_fcp_args(parse("--fcp-profile-table", str(tmp_path / "nope.json")))


def test_malformed_table_names_field(tiny_table):
    doc = json.loads(tiny_table.read_text())
    del doc["hardware"]["ranks_per_node"]
    tiny_table.write_text(json.dumps(doc))
    with pytest.raises(FCPArgumentError, match="ranks_per_node"):
        validate_fcp_args(parse("--fcp-profile-table", str(tiny_table)))


def test_table_for_another_model_shape(tiny_table):
    with pytest.raises(FCPArgumentError, match=r"model.hidden=64.*--hidden-size=128"):
        validate_fcp_args(parse("--fcp-profile-table", str(tiny_table), "--hidden-size", "128"))


def test_table_for_another_model_names_every_differing_field(tiny_table):
    expected = r"model.layers=2 but --num-layers=3, model.heads=4 but --num-attention-heads=8"
    with pytest.raises(FCPArgumentError, match=expected):
        validate_fcp_args(parse("--fcp-profile-table", str(tiny_table), "--num-layers", "3",
                                "--num-attention-heads", "8"))


def test_preset_for_another_model_names_the_flag_the_fields_and_the_fitting_presets():
    expected = (r"--fcp-preset='a3-qwen3vl-8b' \(YAML key fcp_preset\) is made for model qwen3vl-8b, not this "
                r"run's: model.layers=36 but --num-layers=2, model.hidden=4096 but --hidden-size=64, "
                r"model.heads=32 but --num-attention-heads=4; choose a preset of this model \(cpu-tiny, cpu-tiny-moe\)")
    with pytest.raises(FCPArgumentError, match=expected):
        validate_fcp_args(parse("--fcp-preset", "a3-qwen3vl-8b"))


def test_preset_of_a_sibling_model_names_only_the_differing_field():
    """Qwen3-VL-4B has 8B's layers and heads but a smaller hidden size: only that field is named."""
    expected = (r"made for model qwen3vl-4b, not this run's: model.hidden=2560 but --hidden-size=4096; "
                r"choose a preset of this model \(a3-qwen3vl-8b, 910b-qwen3vl-8b, h100-qwen3vl-8b, h200-qwen3vl-8b\)")
    with pytest.raises(FCPArgumentError, match=expected):
        validate_fcp_args(parse("--fcp-preset", "h100-qwen3vl-4b", *QWEN3VL_8B))


def test_preset_kv_heads_are_checked_with_group_query_attention():
    validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--group-query-attention"))  # 2 query groups, as tiny
    with pytest.raises(FCPArgumentError, match=r"--fcp-preset='cpu-tiny'.*model.kv_heads=2 but --num-query-groups=4"
                                               r"; no preset has this model's shape"):
        validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--group-query-attention", "--num-query-groups", "4"))


def test_preset_is_not_checked_against_dimensions_the_run_does_not_set():
    """MindSpeed's first parse and runs whose model comes from elsewhere carry no Megatron model sizes."""
    args = parse("--fcp-preset", "a3-qwen3vl-8b")
    args.num_layers = args.hidden_size = args.num_attention_heads = None
    validate_fcp_args(args)


def test_table_for_another_tp(tiny_table):
    with pytest.raises(FCPArgumentError, match="--tensor-model-parallel-size=2"):
        validate_fcp_args(parse("--fcp-profile-table", str(tiny_table),
                                         "--tensor-model-parallel-size", "2"))


def test_max_degree_above_plane():
    with pytest.raises(FCPArgumentError, match=r"--fcp-max-degree=9 exceeds the 8"):
        validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--fcp-max-degree", "9"))


def test_max_degree_counts_only_dp_cp_ranks():
    with pytest.raises(FCPArgumentError, match="exceeds the 4"):
        validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--fcp-max-degree", "5",
                                         "--tensor-model-parallel-size", "2"))


def test_ulysses_without_any_dividing_degree(tmp_path):
    """28 heads on TP 4: 7 heads per TP rank, which no degree in 2..6 divides (a table measured for such a model)."""
    table = preset_table("a3-qwen3vl-8b")
    table = dataclasses.replace(table, tp=4, model=dataclasses.replace(table.model, layers=28, hidden=3584, heads=28,
                                                                       kv_heads=4))
    path = tmp_path / "heads28.json"
    table.save(path)
    shape = ("--num-layers", "28", "--hidden-size", "3584", "--num-attention-heads", "28")
    with pytest.raises(FCPArgumentError, match="--fcp-attention-algo ulysses.*7 attention heads"):
        validate_fcp_args(parse("--fcp-profile-table", str(path), *shape, "--fcp-attention-algo", "ulysses",
                                "--tensor-model-parallel-size", "4", "--fcp-max-degree", "6", world_size=32))


def test_incompatible_feature():
    with pytest.raises(FCPArgumentError, match="--use-cp-send-recv-overlap"):
        validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--use-cp-send-recv-overlap"))


def _with_training_options(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--context-parallel-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--micro-batch-size"):
        parser.add_argument(flag, type=int, default=1)
    parser.add_argument("--calculate-per-token-loss", action="store_true")
    FCPFeature().register_args(parser)
    args = parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", "--fcp-preset", "a3-qwen3vl-8b", *argv])
    args.world_size = 8
    return args


def test_micro_batch_size_must_be_one():
    with pytest.raises(FCPArgumentError, match="--micro-batch-size=2"):
        validate_fcp_args(_with_training_options("--micro-batch-size", "2", "--calculate-per-token-loss"))


def test_hooks_ignore_runs_without_fcp():
    """MindSpeed calls every feature's validation hooks: a run without FCP must pass through untouched."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--context-parallel-size", type=int, default=4)
    FCPFeature().register_args(parser)
    args = parser.parse_args(["--context-parallel-algo", "ulysses_cp_algo"])
    feature = FCPFeature()
    feature.pre_validate_args(args)
    feature.validate_args(args)  # no cost source given, yet no error: FCP is off
    feature.post_validate_args(args)
    assert args.context_parallel_size == 4


def test_unknown_fcp_option_kept_by_parse_known_args_is_named():
    args = parse("--fcp-preset", "cpu-tiny")
    args.fcp_max_degre = "8"  # a misspelt YAML key, as MindSpeed's parse_known_args would keep it
    expected = r"unknown FCP option --fcp-max-degre \(did you mean --fcp-max-degree\?\)"
    with pytest.raises(FCPArgumentError, match=expected):
        validate_fcp_args(args)


def test_fcp_options_list_matches_the_parser():
    from mindspeed_mm_fcp.options import FCP_OPTIONS

    parser = argparse.ArgumentParser()
    FCPFeature().register_args(parser)
    assert tuple(a.dest for a in parser._actions if a.dest.startswith("fcp_")) == tuple(o.dest for o in FCP_OPTIONS)


def test_an_attention_kernel_that_is_not_installed_is_refused_at_validation_naming_what_is_available():
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    with pytest.raises(FCPArgumentError, match=r"--fcp-attention-kernel: fcp_attention_kernel='flash_attn' is not "
                                               r"available here \(No module named 'flash_attn'\); available: auto, "):
        validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--fcp-attention-kernel", "flash_attn"))
    args = parse("--fcp-preset", "cpu-tiny")
    args.fcp_attention_kernel = "cudnn"
    with pytest.raises(FCPArgumentError, match="--fcp-attention-kernel='cudnn': choose one of auto, npu_fusion, "
                                               "torch_varlen, flash_attn, torch"):
        validate_fcp_args(args)
    validate_fcp_args(parse("--fcp-preset", "cpu-tiny", "--fcp-attention-kernel", "torch"))


def test_an_unreadable_hccl_buffer_size_stops_at_validation_naming_the_variable(monkeypatch):
    args = parse("--fcp-preset", "a3-qwen3vl-8b", *QWEN3VL_8B, world_size=64)
    monkeypatch.setenv("HCCL_BUFFSIZE", "200MB")
    with pytest.raises(FCPArgumentError, match=r"HCCL_BUFFSIZE='200MB' is not a whole number of MB"):
        validate_fcp_args(args)
    # A CPU (gloo) run keeps no HCCL buffers: the variable is not read.
    validate_fcp_args(parse("--fcp-preset", "cpu-tiny"))


def test_communicator_buffers_that_do_not_fit_stop_at_validation_with_the_figures(monkeypatch):
    monkeypatch.setenv("HCCL_BUFFSIZE", "200")
    validate_fcp_args(parse("--fcp-preset", "a3-qwen3vl-8b", *QWEN3VL_8B, world_size=64))
    monkeypatch.setenv("HCCL_BUFFSIZE", "1000")
    args = parse("--fcp-preset", "a3-qwen3vl-8b", *QWEN3VL_8B, "--fcp-communicator-budget", "40", world_size=64)
    with pytest.raises(FCPArgumentError, match=r"40 FCP \+ 6 MindSpeed / Megatron communicators x 2 x "
                                               r"HCCL_BUFFSIZE=1000 MB = 89.84 GiB.*lower the communicator budget "
                                               r"\(fcp_communicator_budget"):
        validate_fcp_args(args)
