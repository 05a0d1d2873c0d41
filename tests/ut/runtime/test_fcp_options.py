"""`FCPOptions`, the one options object of the three fronts: built from `--fcp-*` flags, from `fcp train`'s YAML
and from the planning CLI, it gives the same cost model, solver config, planner and plan source."""
from __future__ import annotations

import argparse
import dataclasses
import logging

import numpy as np
import pytest

from mindspeed_mm.core.fcp.sandbox.run_config import load_run_config
from mindspeed_mm.core.fcp.cli import build_parser
from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions
from mindspeed_mm.core.fcp.runtime.recalibration import PLAN_LAG, WARMUP_STEPS
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.solver.plan import INDEPENDENT, LOCKSTEP
from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm_fcp.options import FCP_OPTIONS

LOGGER = "mindspeed_mm.core.fcp.runtime.plan_source"


def planner_from_args(args: argparse.Namespace, num_ranks: int):  # type: ignore[no-untyped-def]
    return FCPOptions.from_namespace(args).batch_planner(num_ranks=num_ranks)


def plan_source_from_args(args: argparse.Namespace, num_ranks: int, batch_lengths, num_steps: int):  # type: ignore[no-untyped-def]
    options = FCPOptions.from_namespace(args)
    return options.plan_source(options.batch_planner(num_ranks=num_ranks), batch_lengths, RunSteps(0, num_steps))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
        parser.add_argument(flag, type=int, default=1)
    FCPFeature().register_args(parser)
    return parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", *argv])


def test_planner_from_args_matches_fcp_train_planner() -> None:
    config = load_run_config("tiny_qwen3_fcp")
    train = config.batch_planner(4)
    # fcp train reduces the gradients once per step and runs idle ranks; Megatron's schedule runs every rank
    # through every micro-batch, so the feature plans lockstep rounds. Otherwise the two plan alike.
    assert train.solver_config.step_semantics == INDEPENDENT
    expected = dataclasses.replace(train, solver_config=dataclasses.replace(train.solver_config,
                                                                             step_semantics=LOCKSTEP))
    planner = planner_from_args(parse("--fcp-preset", "cpu-tiny", "--fcp-max-tokens-per-rank", "48"), 4)
    assert planner.solver_config == expected.solver_config
    lengths = np.random.default_rng(3).integers(8, 190, size=12)
    assert planner.plan(lengths).digest() == expected.plan(lengths).digest()


def test_options_reach_the_cost_model_and_solver(tmp_path) -> None:
    # 12 ranks, groups of up to 6: every contiguous range fits a budget of 21 communicators per rank.
    args = parse("--fcp-preset", "a3-qwen3vl-8b", "--fcp-attention-algo", "ring", "--fcp-max-degree", "6",
                 "--fcp-ranks-per-node", "4", "--fcp-max-tokens-per-rank", "1000", "--fcp-communicator-budget", "21")
    planner = planner_from_args(args, 12)
    assert (planner.solver_config.max_degree, planner.solver_config.ranks_per_node) == (6, 4)
    assert planner.solver_config.catalogue(planner.cost.algos).contiguous
    assert planner.cost.capacity_tokens == 1000
    plan = planner.plan([3000, 200, 5000, 800, 100, 2500])
    assert {g.algo for r in plan.rounds for g in r.groups if g.degree > 1} <= {"ring"}
    assert max(g.degree for r in plan.rounds for g in r.groups) <= 6

    table = tmp_path / "table.json"
    planner.cost.table.save(table)
    from_table = FCPOptions.from_namespace(parse("--fcp-profile-table", str(table), "--fcp-max-tokens-per-rank",
                                                 "1000")).cost_model(num_ranks=12)
    assert from_table.capacity_tokens == 1000


def test_the_three_fronts_build_the_same_options() -> None:
    yaml_options = load_run_config("tiny_qwen3_fcp").fcp
    flags = FCPOptions.from_namespace(parse(*[f"--{f.metadata['key'].replace('_', '-')}={getattr(yaml_options, f.name)}"
                                               for f in dataclasses.fields(FCPOptions)
                                               if getattr(yaml_options, f.name) is not None]))
    assert flags == yaml_options
    cli = build_parser().parse_args(["plan", "--preset", "cpu-tiny", "--max-degree", "3", "--ranks-per-node", "2",
                                     "--max-tokens-per-rank", "48"])
    assert FCPOptions.from_cli(cli) == FCPOptions(preset="cpu-tiny", max_degree=3, ranks_per_node=2,
                                                  max_tokens_per_rank=48)
    assert [f.metadata["key"] for f in dataclasses.fields(FCPOptions)] == [o.dest for o in FCP_OPTIONS]
    with pytest.raises(ValueError, match="--fcp-max-degree: must be a positive integer, got 0"):
        FCPOptions.from_values({"fcp_max_degree": 0})


@pytest.mark.parametrize("async_planning", ["true", "false"])
def test_plan_source_plans_step_after_step(async_planning: str, caplog: pytest.LogCaptureFixture) -> None:
    args = parse("--fcp-preset", "cpu-tiny", "--fcp-max-tokens-per-rank", "48", "--fcp-async-planning",
                 async_planning, "--fcp-log-plan", "--fcp-recalibrate", "false")
    batches = [[150, 20, 9, 60], [30, 30, 30, 100], [8, 8, 180, 12]]
    source = plan_source_from_args(args, 4, lambda step: batches[step], num_steps=3)
    planner = planner_from_args(args, 4)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        digests = [source.plan(step).plan.digest() for step in range(len(batches))]
    source.close()
    assert digests == [planner.plan(b).digest() for b in batches]
    assert [r.message.split(":")[0] for r in caplog.records] == [f"FCP plan of step {i}" for i in (1, 2, 3)]


@pytest.mark.parametrize("async_planning", ["true", "false"])
def test_measured_group_times_recalibrate_the_plans_two_steps_later(
    async_planning: str, caplog: pytest.LogCaptureFixture
) -> None:
    args = parse("--fcp-preset", "cpu-tiny", "--fcp-max-tokens-per-rank", "48", "--fcp-async-planning",
                 async_planning, "--fcp-log-plan", "--fcp-recalibration-smoothing", "1")
    batches = [[150, 20, 9, 60], [30, 30, 30, 100], [8, 8, 180, 12], [40, 90, 70, 5]]
    source = plan_source_from_args(args, 4, lambda step: batches[step], num_steps=len(batches))
    assert source.wants_measurements
    base = planner_from_args(args, 4).cost

    def base_ms(batch: list[int], group) -> float:  # type: ignore[no-untyped-def]
        return float(base.group_time_ms(base.workload([batch[s] for s in group.samples]), group.degree, group.algo))

    with caplog.at_level(logging.INFO, logger=LOGGER):
        for step, batch in enumerate(batches):
            plan = source.plan(step).plan
            for round_plan in plan.rounds:
                for group in round_plan.groups:
                    # Planned with the base model until step 1's times (3x every prediction) are known;
                    # step 0 is the warm-up, whose times are logged only.
                    expected = base_ms(batch, group) * (3.0 if step >= PLAN_LAG + WARMUP_STEPS else 1.0)
                    assert group.predicted_ms == pytest.approx(expected, rel=1e-9), (step, group)
            source.record_measured(step, [[3.0 * base_ms(batch, g) for g in r.groups] for r in plan.rounds])
    source.close()
    calibrations = [r.message for r in caplog.records if r.message.startswith("calibration")]
    assert len(calibrations) == len(batches)
    assert "mean group time error: 66.7% (uncorrected model 66.7%)" in calibrations[0]
    assert "mean group time error: 66.7% (uncorrected model 66.7%)" in calibrations[2]
    assert "mean group time error: 0.0% (uncorrected model 66.7%)" in calibrations[3]
