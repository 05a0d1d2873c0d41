"""`fcp demo`: the planning part prints a plan that matches the planner, and the training summary's
cost-model error compares the preset's and the recalibrated predictions."""
from __future__ import annotations

import re

import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.sandbox.fcp_demo import _group_time_error


def test_planning_part_prints_the_plan_and_the_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--ranks", "16", "--global-batch-size", "64", "--skip-training"]) == 0
    out = capsys.readouterr().out
    assert "== Plan: openvid-like batch of 64 samples on 16 NPUs" in out
    rounds = re.findall(r"round \d+: +[\d,.]+ ms +(\d+) samples", out)
    assert rounds and sum(int(n) for n in rounds) == 64
    gap = float(re.search(r"\(gap ([\d.]+)\)", out).group(1))
    assert 1.0 <= gap < 1.5
    for baseline in ("megatron_static_cp", "deepspeed_ulysses", "mcore_dynamic_cp", "megatron_hybrid_cp",
                     "mindspeed_dp_cp_switch", "tuned_static_fsdp", "tuned_static_ddp"):
        found = re.search(rf"{baseline} +[\d,.]+ ms +FCP ([\d.]+)x \((faster|slower|as fast)\)", out)
        assert found, baseline
        ratio, verdict = float(found.group(1)), found.group(2)
        assert verdict == ("as fast" if ratio == 1.0 else "faster" if ratio > 1.0 else "slower"), found.group(0)
    # FCP's own step time with the step costs, under FSDP and DDP; FCP under DDP is not listed as a baseline.
    assert re.search(r"with the step's own costs \(FSDP rounds, optimizer\): [\d,.]+ ms; under DDP [\d,.]+ ms", out)
    assert not re.search(r"^  fcp_ddp ", out, flags=re.M)
    assert "== Train" not in out


def test_group_time_error_averages_every_group_of_every_step() -> None:
    steps = [
        {"predicted_group_ms": [[10.0, 30.0]], "measured_group_ms": [[20.0, 30.0]]},
        {"predicted_group_ms": [[5.0], [8.0]], "measured_group_ms": [[4.0], [8.0]]},
    ]
    assert _group_time_error(steps) == pytest.approx(100 * (0.5 + 0.0 + 0.25 + 0.0) / 4)
