"""The `fcp` command line: `plan` and `simulate` output, JSON schema, charts and bad-input errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cli import COMMAND_MODULES, build_parser, main
from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.workloads import generate_samples
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.planner import plan_batch

SMALL = ["--ranks", "8", "--preset", "a3-qwen3vl-8b"]


def test_command_modules_are_listed_with_the_commands_they_register() -> None:
    assert [m.rsplit(".", 1)[1] for m in COMMAND_MODULES] == [
        "fcp_plan", "fcp_simulate", "fcp_train", "fcp_demo", "fcp_overlay", "fcp_profile"]
    commands = build_parser()._subparsers._group_actions[0].choices
    assert list(commands) == ["plan", "simulate", "train", "demo", "overlay", "profile"]


def test_plan_prints_rounds_totals_and_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--dataset", "msrvtt", "--batch-size", "24", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "FCP plan for msrvtt batch of 24 samples (seed 0) on 8 ranks" in out
    assert "round 0:" in out and "ranks" in out and "d=" in out
    for label in ("predicted step time", "lower bound", "planning time", "plan digest"):
        assert label in out
    assert "megatron_static_cp" in out and "FCP speedup" in out


def test_plan_for_independent_groups_prints_their_step_time(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--dataset", "openvid", "--batch-size", "64", "--seed", "1", *SMALL]
    assert main([*args, "--step-semantics", "independent", "--json"]) == 0
    plan = Plan.from_json(json.loads(capsys.readouterr().out))
    cost = CostModel.from_preset("a3-qwen3vl-8b", shard_ranks=8)
    samples = generate_samples("openvid", 64, 1)
    config = SolverConfig(8, ranks_per_node=cost.ranks_per_node, step_semantics="independent")
    validate_plan(plan, samples.lengths, cost, samples.vision_patches, priced=True)
    assert plan.digest() == plan_batch(samples.lengths, cost, config, samples.vision_patches).digest()
    assert plan.extras["independent_replicas"] == {"cp_degree": 1, "algo": "ring"}   # not the lockstep plan
    assert main([*args, "--step-semantics", "independent"]) == 0
    out = capsys.readouterr().out
    assert "ms with each group waiting only for its own members" in out
    assert main([*args, "--step-semantics", "async"]) == 2
    assert "--step-semantics: invalid choice: 'async'" in capsys.readouterr().err


def test_plan_json_matches_the_planner(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--dataset", "openvid", "--batch-size", "40", "--seed", "5", "--json", *SMALL]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("rounds", "predicted_ms", "lower_bound_ms", "solver_ms", "num_ranks"):
        assert key in data
    group = data["rounds"][0]["groups"][0]
    assert set(group) >= {"ranks", "degree", "algo", "samples", "predicted_ms"}
    cost = CostModel.from_preset("a3-qwen3vl-8b")
    samples = generate_samples("openvid", 40, 5)
    config = SolverConfig(num_ranks=8, ranks_per_node=cost.ranks_per_node)
    plan = Plan.from_json(data)
    validate_plan(plan, samples.lengths, cost, samples.vision_patches, priced=True)
    assert plan.digest() == plan_batch(samples.lengths, cost, config, samples.vision_patches).digest()


def test_plan_from_lengths_file_with_gantt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(str(x) for x in [4000, 70000, 1200, 9000, 300, 2500]) + "\n")
    gantt = tmp_path / "plan.png"
    assert main(["plan", "--lengths", str(lengths), "--gantt", str(gantt), *SMALL]) == 0
    assert "(6 samples)" in capsys.readouterr().out
    assert gantt.read_bytes()[:4] == b"\x89PNG"


def test_simulate_prints_the_strategy_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "speedups.png"
    argv = ["simulate", "--datasets", "msrvtt,internvid", "--batches", "1", "--global-batch-size", "48",
            "--seeds", "0,1", "--no-progress", "--plot", str(plot), *SMALL]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in ("fcp", "megatron_static_cp", "deepspeed_ulysses", "mcore_dynamic_cp", "mindspeed_dp_cp_switch",
                 "tuned_static_fsdp", "tuned_static_ddp"):
        assert name in out
    assert "FCP speedup [min-max]" in out and "per seed [min-max]" in out and "internvid" in out
    assert "seeds 0,1 x 1 batches x 48 samples" in out
    assert "1.000 [1.000-1.000]" in out  # FCP against itself
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["plan", "--ranks", "0"], "argument --ranks: must be a positive integer, got 0"),
        (["plan", "--batch-size", "x"], "argument --batch-size: expected a positive integer, got 'x'"),
        (["plan", "--seed", "-1"], "argument --seed: must be a non-negative integer, got -1"),
        (["plan", "--dataset", "kinetics"], "argument --dataset: invalid choice: 'kinetics'"),
        (["plan", "--ranks", "8", "--max-degree", "16"], "--max-degree 16 exceeds --ranks 8"),
        (["plan", "--preset", "no-such-preset"], "--preset no-such-preset"),
        (["plan", "--ranks", "8", "--max-tokens-per-rank", "1000"], "ranks at 1000 tokens per rank"),
        (["simulate", "--strategies", "fcp,zero3"], "--strategies: unknown 'zero3'"),
        (["simulate", "--datasets", "msrvtt,"], "argument --datasets: expected comma-separated names"),
        (["simulate", "--seeds", "0,1,0"], "argument --seeds: a seed is repeated in '0,1,0'"),
        (["simulate", "--seeds", "0,-2"], "argument --seeds: must be a non-negative integer, got -2"),
        (["simulate", "--seeds", "0,1", "--seed", "2"], "argument --seed: not allowed with argument --seeds"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_bad_lengths_file_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("100\n-5\n")
    assert main(["plan", "--lengths", str(path), *SMALL]) == 2
    assert f"{path}:2: sample length must be positive, got -5" in capsys.readouterr().err
    path.write_text("100\n200\n")
    assert main(["plan", "--lengths", str(path), "--batch-size", "2", *SMALL]) == 2
    assert "--batch-size applies to --dataset only" in capsys.readouterr().err


def test_infeasible_sample_names_its_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "lengths.json"
    path.write_text(json.dumps([1000, 2000, 50_000]))
    assert main(["plan", "--lengths", str(path), "--ranks", "8", "--max-tokens-per-rank", "4096"]) == 2
    err = capsys.readouterr().err
    assert "sample 2 (length 50000 tokens) needs at least 13 ranks" in err


def test_preset_memory_follows_the_real_number_of_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The preset shards its state over --ranks, not over a whole node: fewer ranks, less room."""
    from argparse import Namespace

    from mindspeed_mm.core.fcp.commands.cli_options import cost_model_from_args

    def capacity(ranks: int) -> int:
        args = Namespace(profile=None, preset="a3-qwen3vl-8b", max_tokens_per_rank=None, ranks=ranks,
                         ranks_per_node=None)
        return cost_model_from_args(args).capacity_tokens

    assert capacity(8) < capacity(16) < capacity(64)
    path = tmp_path / "lengths.json"
    path.write_text(json.dumps([1000, 2000]))
    assert main(["plan", "--lengths", str(path), "--ranks", "2"]) == 2
    err = capsys.readouterr().err
    assert "does not fit" in err and "--ranks" in err
