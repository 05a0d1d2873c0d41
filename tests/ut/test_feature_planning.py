"""The planner and plan source built from `--fcp-*` options plan exactly like `fcp train`'s planner."""
from __future__ import annotations

import argparse
import logging

import numpy as np
import pytest

from mindspeed_mm.core.fcp.executor.config import load_run_config
from mindspeed_mm.core.fcp.executor.planning import BatchPlanner
from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.planning import cost_model_from_args, plan_source_from_args, planner_from_args


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
        parser.add_argument(flag, type=int, default=1)
    FCPFeature().register_args(parser)
    return parser.parse_args(["--context-parallel-algo", "fcp_cp_algo", *argv])


def test_planner_from_args_matches_fcp_train_planner() -> None:
    config = load_run_config("tiny_qwen3_fcp")
    expected = BatchPlanner.from_config(config, 4)
    planner = planner_from_args(parse("--fcp-preset", "cpu-tiny", "--fcp-max-tokens-per-rank", "48"), 4)
    assert planner.solver_config == expected.solver_config
    lengths = np.random.default_rng(3).integers(8, 190, size=12)
    assert planner.plan(lengths).digest() == expected.plan(lengths).digest()


def test_options_reach_the_cost_model_and_solver(tmp_path) -> None:
    args = parse("--fcp-preset", "a3-qwen3vl-8b", "--fcp-attention-algo", "ring", "--fcp-max-degree", "6",
                 "--fcp-ranks-per-node", "4", "--fcp-max-tokens-per-rank", "1000")
    planner = planner_from_args(args, 12)
    assert (planner.solver_config.max_degree, planner.solver_config.ranks_per_node) == (6, 4)
    assert planner.cost.capacity_tokens == 1000
    plan = planner.plan([3000, 200, 5000, 800, 100, 2500])
    assert {g.algo for r in plan.rounds for g in r.groups if g.degree > 1} <= {"ring"}
    assert max(g.degree for r in plan.rounds for g in r.groups) <= 6

    table = tmp_path / "table.json"
    cost_model_from_args(args).table.save(table)
    from_table = cost_model_from_args(parse("--fcp-profile-table", str(table), "--fcp-max-tokens-per-rank", "1000"))
    assert from_table.capacity_tokens == 1000


@pytest.mark.parametrize("async_planning", ["true", "false"])
def test_plan_source_plans_step_after_step(async_planning: str, caplog: pytest.LogCaptureFixture) -> None:
    args = parse("--fcp-preset", "cpu-tiny", "--fcp-max-tokens-per-rank", "48", "--fcp-async-planning",
                 async_planning, "--fcp-log-plan")
    batches = [[150, 20, 9, 60], [30, 30, 30, 100], [8, 8, 180, 12]]
    source = plan_source_from_args(args, 4, lambda step: batches[step], num_steps=3)
    planner = planner_from_args(args, 4)
    with caplog.at_level(logging.INFO, logger="mindspeed_mm.features_manager.fcp.planning"):
        digests = [source().digest() for _ in batches]
    source.close()
    assert digests == [planner.plan(b).digest() for b in batches]
    assert [r.message.split(":")[0] for r in caplog.records] == [f"FCP plan of step {i}" for i in (1, 2, 3)]
