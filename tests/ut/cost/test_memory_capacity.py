"""Memory capacity from the run's real number of ranks, and --max-tokens-per-rank as a cap only."""
from __future__ import annotations

import logging

import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable
from mindspeed_mm.core.fcp.sandbox.run_config import load_run_config
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch
from mindspeed_mm.core.fcp.solver import memory_checks
from mindspeed_mm.core.fcp.solver.baselines import megatron_static_cp

PRESET = "a3-qwen3vl-8b"
CHECKS = "mindspeed_mm.core.fcp.solver.memory_checks"


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_checks, "_warned", set())


def test_preset_capacity_follows_the_ranks_the_state_is_sharded_over() -> None:
    # FSDP state of the 8B model over 8 ranks leaves room for fewer tokens than over one A3 node (16).
    on_8, on_16, on_64 = (CostModel.from_preset(PRESET, shard_ranks=r) for r in (8, 16, 64))
    assert (on_8.capacity_tokens, on_16.capacity_tokens) == (24953, 30965)
    assert on_8.capacity_tokens < on_16.capacity_tokens < on_64.capacity_tokens
    assert (on_8.state_shard_ranks, on_16.state_shard_ranks) == (8, 16)
    assert CostModel.from_preset(PRESET).state_shard_ranks == 16  # default: one node


def test_state_shard_ranks_unknown_for_unsharded_or_measured_tables() -> None:
    assert CostModel.from_preset("h100-qwen3vl-2b", sharding="none").state_shard_ranks is None
    doc = CostModel.from_preset(PRESET).table.to_dict()
    doc["provenance"] = {"source": "fcp profile"}  # a measured table records no sharding options
    assert CostModel(ProfileTable.from_dict(doc)).state_shard_ranks is None


# The preset's capacity (24,953 / 35,473 tokens) less the HCCL buffers of (7 / 10 FCP + 6 Megatron) communicators,
# 2 x 200 MB each (`test_communicator_memory`).
@pytest.mark.parametrize("ranks, capacity", [(8, 21213), (64, 30870)])
def test_fcp_plan_capacity_is_that_of_the_run(ranks: int, capacity: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--dataset", "msrvtt", "--batch-size", "16", "--ranks", str(ranks), "--preset", PRESET]) == 0
    assert f"{capacity:,} tokens per rank" in capsys.readouterr().out


def test_max_tokens_per_rank_only_lowers_the_limit(capsys: pytest.CaptureFixture[str],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    base = ["plan", "--dataset", "msrvtt", "--batch-size", "16", "--ranks", "8", "--preset", PRESET]
    assert main([*base, "--max-tokens-per-rank", "9000"]) == 0
    assert "9,000 tokens per rank" in capsys.readouterr().out
    with caplog.at_level(logging.WARNING):
        assert main([*base, "--max-tokens-per-rank", "5000000"]) == 0
    assert "21,213 tokens per rank" in capsys.readouterr().out
    assert "capped at 21213" in caplog.text and "--max-tokens-per-rank" in caplog.text


def test_planners_warn_when_the_state_is_sharded_wider_than_the_run(caplog: pytest.LogCaptureFixture) -> None:
    wide = CostModel.from_preset(PRESET, shard_ranks=16)
    lengths = [4000, 9000, 2500, 700, 1200, 300, 5000, 800]
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        plan_batch(lengths, wide, SolverConfig(num_ranks=8))
        plan_batch(lengths, wide, SolverConfig(num_ranks=8))
        megatron_static_cp(lengths, wide, SolverConfig(num_ranks=8), cp_degree=1)
    warnings = [r.getMessage() for r in caplog.records if r.name == CHECKS]
    assert len(warnings) == 1  # once per (shard ranks, run ranks)
    assert "over 16 ranks but the run has 8 FCP ranks" in warnings[0] and "shard_ranks=8" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=CHECKS):
        plan_batch(lengths, wide, SolverConfig(num_ranks=16))
        plan_batch(lengths, CostModel.from_preset(PRESET, shard_ranks=8), SolverConfig(num_ranks=8))
    assert not [r for r in caplog.records if r.name == CHECKS]


def test_fcp_train_cost_model_shards_over_the_run_and_takes_its_node_size() -> None:
    config = load_run_config("tiny_qwen3_fcp")
    assert config.fcp.cost_model(num_ranks=4).state_shard_ranks == 4
    default = CostModel.from_preset(config.fcp.preset).state_shard_ranks  # one node of the preset
    assert config.fcp.cost_model(num_ranks=None).state_shard_ranks == default != 4
