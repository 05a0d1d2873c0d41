"""Planner errors name the options users can set (commands, fcp train YAML, MindSpeed flags), never an
internal search constant."""
from __future__ import annotations

import re

import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver import InfeasibleSampleError, SolverConfig, plan_batch
from mindspeed_mm.core.fcp.solver.errors import NoAlgoForSampleError, no_plan_error
from scenario_costs import a3_scenario

A3 = a3_scenario(shard_ranks=8)  # 24,953 tokens per rank
INTERNAL = re.compile(r"max_rounds=|extra_rounds|_THOROUGH|_LEAN|window|SearchLimits")
MAX_DEGREE = ("--max-degree", "fcp_max_degree", "--fcp-max-degree")


def _message(lengths: list[int], config: SolverConfig, cost: CostModel = A3) -> str:
    with pytest.raises(ValueError) as caught:
        plan_batch(lengths, cost, config)
    text = str(caught.value)
    assert not INTERNAL.search(text), text
    return text


def test_too_few_samples_to_occupy_every_rank_says_what_to_change() -> None:
    text = _message([3000], SolverConfig(8, max_degree=4))
    assert "1 sample cannot occupy all 8 ranks in one round" in text
    assert "a round needs at least 2 samples" in text
    assert all(option in text for option in MAX_DEGREE) and "to at least 8" in text
    assert "--batch-size" in text and "global_batch_size" in text
    assert "max_rounds" not in text  # no round limit was set: none is named


def test_too_few_samples_for_the_rounds_memory_needs() -> None:
    # 3 samples of 20K tokens on 2 ranks with groups of 1: memory needs 2 rounds of 2 samples each.
    text = _message([20_000, 20_000, 20_000], SolverConfig(2, max_degree=1))
    assert "3 samples cannot occupy all 2 ranks in each of the 2 rounds its memory needs" in text
    # One sample per round: groups of 2 ranks would do.
    assert "a round needs at least 2 samples" in text and "--fcp-max-degree) to at least 2" in text


def test_round_limit_is_named_as_the_python_api_setting() -> None:
    text = _message([3000] * 12, SolverConfig(4, max_rounds=1), a3_scenario(max_tokens_per_rank=8192))
    assert "SolverConfig.max_rounds (a Python API setting" in text and "raise or unset max_rounds" in text


@pytest.mark.parametrize("ranks, max_degree, advice", [
    (64, 8, "--max-degree; fcp train YAML: fcp_max_degree; MindSpeed-MM: --fcp-max-degree) to at least 13"),
    (8, None, "more FCP ranks (fcp plan / simulate: --ranks; a training run: more devices or a smaller TP x PP), "
              "at least 13"),
    (8, 4, "at least 13"),
])
def test_sample_too_long_names_max_degree_or_ranks(ranks: int, max_degree: int | None, advice: str) -> None:
    text = _message([300_000, 100], SolverConfig(ranks, max_degree=max_degree))
    assert text.startswith("sample 0 (length 300000 tokens) needs at least 13 ranks at 24953 tokens per rank")
    assert advice in text and "--max-tokens-per-rank / fcp_max_tokens_per_rank can only lower the limit" in text
    if max_degree is None or ranks < 13:
        assert "raise the maximum group degree" not in text


def test_no_algo_on_the_allowed_degrees_names_the_attention_option() -> None:
    ulysses = a3_scenario(shard_ranks=8, algos=("ulysses",))
    # 60K tokens need 3 ranks; Ulysses cannot split the 32 heads over 3.
    with pytest.raises(NoAlgoForSampleError) as caught:
        plan_batch([60_000, 100, 100], ulysses, SolverConfig(8, max_degree=3))
    text = str(caught.value)
    assert isinstance(caught.value, InfeasibleSampleError) and caught.value.index == 0
    assert "no allowed attention algo (ulysses) runs on a degree from 3 to 3" in text
    assert "fcp_attention_algo" in text and "--fcp-attention-algo" in text and "--max-degree" in text


def test_a_plan_the_planner_misses_is_reported_as_such() -> None:
    text = str(no_plan_error(10, 1, 8, 8, 24953, None))
    assert "found no plan" in text and "planner miss" in text and all(option in text for option in MAX_DEGREE)


def test_cli_prints_the_option_to_change(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.json"
    path.write_text("[3000]")
    assert main(["plan", "--lengths", str(path), "--ranks", "8", "--max-degree", "4"]) == 2
    err = capsys.readouterr().err
    assert "fcp plan: error: the batch's 1 sample cannot occupy all 8 ranks" in err and "--max-degree" in err
