"""Batch planner of a run (FCP solver or static ring CP), the pre-training feasibility check, and
`fcp train` refusing an infeasible sample before training starts."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from mindspeed_mm.core.fcp.sandbox.run_config import load_run_config, parse_run_config
from mindspeed_mm.core.fcp.sandbox.text_dataset import build_dataset
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.sandbox.trainer import check_samples_fit
from mindspeed_mm.core.fcp.solver import InfeasibleSampleError, validate_plan


def _config(**gpt_args: object):
    shipped = load_run_config("tiny_qwen3_fcp")
    data = yaml.safe_load(Path(shipped.source).read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    data["gpt_args"].update(gpt_args)
    return parse_run_config(data, source="test.yaml")


def test_fcp_planner_is_deterministic_and_valid() -> None:
    config = _config()
    sampler = PlanAwareSampler(build_dataset(config), config.training.global_batch_size, config.training.train_iters)
    planner = config.batch_planner(6)
    assert planner.static_cp_degree is None and planner.solver_config.num_ranks == 6
    for step in range(3):
        lengths = sampler.batch_lengths(step)
        first, second = planner.plan(lengths), planner.plan(lengths)
        assert first.digest() == second.digest()
        validate_plan(first, lengths, planner.cost)


def test_static_planner_keeps_fixed_groups() -> None:
    config = _config(context_parallel_algo="megatron_cp_algo", context_parallel_size=2, fcp_max_tokens_per_rank=96)
    sampler = PlanAwareSampler(build_dataset(config), config.training.global_batch_size, config.training.train_iters)
    planner = config.batch_planner(4)
    assert planner.cost.algos == ("ring",)
    plan = planner.plan(sampler.batch_lengths(0))
    validate_plan(plan, sampler.batch_lengths(0), planner.cost)
    for round_plan in plan.rounds:
        assert [g.ranks for g in round_plan.groups] == [(0, 1), (2, 3)]
        assert {g.algo for g in round_plan.groups} == {"ring"}


def test_infeasible_sample_is_named_before_training() -> None:
    config = _config(fcp_max_degree=2)
    dataset = build_dataset(config)
    planner = config.batch_planner(4)
    too_long = np.flatnonzero(dataset.lengths > 2 * 48)
    assert too_long.size, "the shipped data must hold a sample longer than 2 ranks x 48 tokens"
    first = int(too_long[0])
    with pytest.raises(InfeasibleSampleError) as caught:
        check_samples_fit(dataset, planner)
    assert (caught.value.index, caught.value.length, caught.value.capacity_tokens) == (
        first,
        int(dataset.lengths[first]),
        48,
    )
    assert f"sample {first} (length {int(dataset.lengths[first])} tokens)" in str(caught.value)


def test_fcp_train_reports_the_sample_and_exits_with_usage_error() -> None:
    # One process means groups of one rank: the first sample above 48 tokens cannot fit.
    lengths = build_dataset(load_run_config("tiny_qwen3_fcp")).lengths
    first = int(np.flatnonzero(lengths > 48)[0])
    done = subprocess.run(
        [sys.executable, "-m", "mindspeed_mm.core.fcp.cli", "train", "tiny_qwen3_fcp", "--cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    length = int(lengths[first])
    message = f"sample {first} (length {length} tokens) needs at least {-(-length // 48)} ranks at 48 tokens per rank"
    assert f"fcp train: error: {message}" in done.stderr
    assert "iteration" not in done.stdout
