"""`fcp profile` end to end on a tiny grid (2 CPU processes), and its bad-input and failure paths."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable
from mindspeed_mm.core.fcp.cost.presets import MODELS
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.profiling import write_profile
from mindspeed_mm.core.fcp.profiler.world import WorldError
from mindspeed_mm.core.fcp.solver import SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.planner import plan_batch

TINY_GRID = ["--attention-lengths", "8,16,32", "--linear-tokens", "32,96", "--message-bytes", "1024,8192",
             "--world-size", "2", "--repeats", "2", "--sweeps", "1", "--no-progress"]


def test_profile_and_validate_a_tiny_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table_path, report_path = tmp_path / "cpu_tiny.json", tmp_path / "report.json"
    argv = ["profile", "-o", str(table_path), *TINY_GRID, "--validate", "--validation-passes", "2",
            "--validation-window-ms", "20", "--report", str(report_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"profile table  {table_path}" in out and "MAPE" in out

    table = ProfileTable.load(table_path)
    prov = table.provenance
    assert prov["source"] == "measured by fcp profile" and prov["profile_seconds"] > 0
    assert {"torch", "python", "fcp"} <= set(prov["versions"]) and prov["device_name"]
    assert prov["measurement"]["clock"] == "cpu" and prov["validated_in_the_same_run"] is True
    assert set(prov["phase_seconds"]) == {"attention", "linear", "communication", "step", "vision", "memory",
                                          "validation"}
    assert table.time.attention_causal_ms.x == (8.0, 16.0, 32.0) and table.time.attention_off_diagonal_ms is not None
    assert set(table.time.attention_ulysses_ms) == {2} and set(table.time.all_to_all_by_group_size_ms) == {2}
    assert table.memory.activation_bytes_per_token > 0 and table.memory.static_bytes > 0
    assert table.step.optimizer_ms > 0 and table.step.replica_reduction_ms > 0 and table.step.fsdp_round_ms > 0
    assert 0 <= table.step.fsdp_overlap <= 1 and set(prov["fsdp2_round_ms_by_tokens"]) == {"32", "96"}
    # The tiny preset's encoder, timed on 1, 2, 4, 8 frame groups.
    assert table.model.vision is not None and table.model.vision.depth == MODELS["tiny"].encoder.depth
    assert set(prov["vision_ms_by_frame_groups"]) == {"1", "2", "4", "8"}
    assert table.time.vision_ms_per_call + table.time.vision_ms_per_patch > 0
    assert table.memory.vision_activation_bytes_per_token > 0

    # The planner takes the measured table as it takes a preset.
    cost = CostModel(table, max_tokens_per_rank=64)
    lengths = [100, 12, 40, 9, 63, 30, 7]
    plan = plan_batch(lengths, cost, SolverConfig(num_ranks=2, ranks_per_node=cost.ranks_per_node))
    validate_plan(plan, lengths, cost)

    report = json.loads(report_path.read_text())
    assert len(report["cases"]) == 8 and report["passes"] == 2
    kinds = {(c["degree"], c["algo"]) for c in report["cases"]}
    assert kinds == {(2, "ring"), (2, "ulysses"), (1, "local")}
    for case in report["cases"]:
        assert case["measured_ms"] > 0 and np.isfinite(case["predicted_ms"]) and len(case["samples_ms"]) == 2
    assert report["mape_percent"] == pytest.approx(np.mean([abs(c["error_percent"]) for c in report["cases"]]))
    # Held out: the grids of 3 or more points scored without each point, the runs priced by the cut table.
    held_out = report["held_out"]
    assert {t["term"] for t in held_out["terms"]} == {"attention, causal document", "ring off-diagonal block",
                                                      "Ulysses attention, degree 2"}
    assert all(t["leave_one_out_mean"] >= 0 and t["largest_from_smaller"] >= 0 for t in held_out["terms"])
    assert held_out["full_table_mape_percent"] == pytest.approx(report["mape_percent"])
    assert held_out["small_table_mape_percent"] >= 0 and held_out["ulysses_rule_mean"] >= 0
    assert "held out: every measured grid point" in out and "with the table cut before its largest sizes" in out


def test_a_run_that_does_not_finish_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    config = ProfileConfig(world_size=2, attention_lengths=(8, 16, 32), linear_tokens=(32, 64),
                           message_bytes=(1024, 2048), timeout_s=0.5)
    with pytest.raises(WorldError, match=r"ranks \[0, 1\] of 2 did not finish within"):
        write_profile(config, path)
    assert list(tmp_path.iterdir()) == []


def _spawned_children(pid: int) -> list[int]:
    """Processes `pid` started with multiprocessing's spawn (its ranks; not the resource tracker)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in cmdline:
                children.append(int(child))
    return children


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to find the spawned ranks")
def test_a_killed_profile_leaves_no_temporary_folder(tmp_path: Path) -> None:
    scratch, out = tmp_path / "tmp", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "mindspeed_mm.core.fcp.cli", "profile", "-o", str(out / "t.json"), *TINY_GRID]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks: list[int] = []
    try:
        pause = threading.Event()
        for _ in range(1200):  # up to about 2 minutes for the interpreter and torch to start the ranks
            ranks = _spawned_children(process.pid)
            if len(ranks) == 2 or process.poll() is not None:
                break
            pause.wait(0.1)
        assert len(ranks) == 2, "the profile's ranks never started"
        process.send_signal(signal.SIGKILL)  # mid-measurement: no handler or finally block runs
        process.wait(timeout=60)
    finally:
        for pid in [process.pid, *ranks]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait(timeout=60)
    assert list(scratch.iterdir()) == []
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-o", "{tmp}/missing/t.json"], "folder .*missing does not exist"),
        (["-o", "{tmp}/t.json", "--report", "{tmp}/r.json"], "--report needs --validate"),
        (["--check-table", "{tmp}/t.json"], "--check-table needs --validate"),
        (["-o", "{tmp}/t.json", "--world-size", "1"], "--world-size 1 measures no communication"),
        (["-o", "{tmp}/t.json", "--dtype", "bf16"], "the CPU profile runs fp32 only"),
        (["-o", "{tmp}/t.json", "--vision-frame-groups", "4"], "--vision-frame-groups needs at least 2 values"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", *[a.replace("{tmp}", str(tmp_path)) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fcp profile: error:")
    assert re.search(message, err), err


def test_non_positive_sizes_are_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["profile", "-o", str(tmp_path / "t.json"), "--attention-lengths", "16,0,64"]) == 2
    assert "sizes must be positive, got 0" in capsys.readouterr().err
