"""The memory limit sets aside the buffers of a rank's communicators: 2 x HCCL_BUFFSIZE each on NPUs."""
from __future__ import annotations

import math

import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.communicator_memory import (
    CommunicatorMemoryError, framework_communicators, hccl_buffer_mb,
)
from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions
from mindspeed_mm.core.fcp.solver import SolverConfig

PRESET = "a3-qwen3vl-8b"
MB = 1 << 20


def _capacity_without(cost: CostModel, reserved_bytes: float) -> int:
    """The memory model's tokens per rank (usable memory less static, workspace and `reserved_bytes`, over the bytes
    of one token), recomputed from the table's figures."""
    hw, mem = cost.table.hardware, cost.table.memory
    free = hw.memory_bytes * hw.usable_memory_fraction - mem.static_bytes - mem.workspace_bytes - reserved_bytes
    return math.floor(free / (mem.activation_bytes_per_token + mem.vision_activation_bytes_per_token))


@pytest.mark.parametrize("ranks", [64, 256])
def test_the_capacity_shrinks_by_two_buffers_per_communicator_a_rank_may_hold(ranks, monkeypatch) -> None:
    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    preset = CostModel.from_preset(PRESET, shard_ranks=ranks)
    worst = SolverConfig(ranks).catalogue(preset.algos).worst
    assert worst == math.ceil(math.log2(ranks)) + 4     # the budget, the plane's group included
    held = worst + framework_communicators(ranks)       # + world, DP, DP with CP, TP x DP (x CP), expert DP
    assert framework_communicators(ranks) == 6
    run = FCPOptions(preset=PRESET).cost_model(num_ranks=ranks)
    assert run.capacity_tokens == _capacity_without(preset, held * 2 * 200 * MB) < preset.capacity_tokens
    monkeypatch.setenv("HCCL_BUFFSIZE", "100")
    half = FCPOptions(preset=PRESET).cost_model(num_ranks=ranks)
    assert half.capacity_tokens == _capacity_without(preset, held * 2 * 100 * MB) > run.capacity_tokens
    # A larger budget sets more aside.
    wider = FCPOptions(preset=PRESET, communicator_budget=worst + 6).cost_model(num_ranks=ranks)
    assert wider.capacity_tokens == _capacity_without(preset, (held + 6) * 2 * 100 * MB)


def test_runs_off_hccl_keep_the_preset_capacity(monkeypatch) -> None:
    # gloo (the CPU preset) and NCCL keep no HCCL buffers: HCCL_BUFFSIZE is not even read.
    monkeypatch.setenv("HCCL_BUFFSIZE", "not a number")
    for preset in ("cpu-tiny", "h200-qwen3vl-8b"):
        assert FCPOptions(preset=preset).cost_model(num_ranks=8).capacity_tokens == \
            CostModel.from_preset(preset, shard_ranks=8).capacity_tokens


@pytest.mark.parametrize("value, message", [
    ("abc", "HCCL_BUFFSIZE='abc' is not a whole number of MB"),
    ("1.5", "HCCL_BUFFSIZE='1.5' is not a whole number of MB"),
    ("0", "HCCL_BUFFSIZE='0' must be at least 1"),
])
def test_an_unreadable_buffer_size_names_the_variable(value, message, monkeypatch) -> None:
    assert hccl_buffer_mb({}) == 200 and hccl_buffer_mb({"HCCL_BUFFSIZE": " 64 "}) == 64
    with pytest.raises(CommunicatorMemoryError, match=message):
        hccl_buffer_mb({"HCCL_BUFFSIZE": value})
    monkeypatch.setenv("HCCL_BUFFSIZE", value)
    with pytest.raises(CommunicatorMemoryError, match="HCCL_BUFFSIZE"):
        FCPOptions(preset=PRESET).cost_model(num_ranks=64)


def test_buffers_that_leave_no_room_stop_with_the_figures(monkeypatch) -> None:
    monkeypatch.setenv("HCCL_BUFFSIZE", "4000")
    with pytest.raises(CommunicatorMemoryError, match=r"10 FCP \+ 6 MindSpeed / Megatron communicators x 2 x "
                                                      r"HCCL_BUFFSIZE=4000 MB = 125.00 GiB.*fcp_communicator_budget"):
        FCPOptions(preset=PRESET).cost_model(num_ranks=64)


def test_framework_communicators_follow_the_parallel_sizes() -> None:
    assert framework_communicators(1) == 0                 # one rank: no group of more than one
    assert framework_communicators(64) == 6
    assert framework_communicators(2, tp=2) == 12          # checked against Megatron in test_step_runtime
    assert framework_communicators(8, tp=2, pp=2) == 15    # + pipeline and the two embedding groups
