"""System test: `fcp train` on 3 CPU processes stops cleanly when a rank stalls or the ranks disagree.

Each rank is started as its own process (the torchrun environment set by hand), so one rank can be
given another configuration, and one can be stopped with SIGSTOP while the others keep running.
Nothing here asserts how long anything took: the subprocess timeouts only bound a hang.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from mindspeed_mm.core.fcp.sandbox.run_config import resolve_config_path

WORLD = 3
RUN_TIMEOUT_S = 300
COMM_TIMEOUT_S = 5


def _config(tmp_path: Path, name: str, **overrides: object) -> Path:
    data = yaml.safe_load(resolve_config_path("tiny_qwen3_fcp").read_text(encoding="utf-8"))
    # 3 ranks hold the longest sample (seq_length 192) at 64 tokens each.
    data["gpt_args"].update({"fcp_max_tokens_per_rank": 64, **overrides})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(configs: list[Path], *options: str) -> list[subprocess.Popen[str]]:
    port = _free_port()
    processes = []
    for rank, config in enumerate(configs):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(len(configs)),
               "LOCAL_WORLD_SIZE": str(len(configs)), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "mindspeed_mm.core.fcp.cli", "train", str(config), "--cpu", *options]
        processes.append(subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE))
    return processes


def _kill(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=RUN_TIMEOUT_S)


def test_a_stalled_rank_makes_the_others_exit_with_the_step_and_the_group(tmp_path: Path) -> None:
    config = _config(tmp_path, "long", train_iters=2000)
    output = tmp_path / "out"
    processes = _launch([config] * WORLD, "--comm-timeout-s", str(COMM_TIMEOUT_S), "--output-dir", str(output))
    stalled = processes[2]
    try:
        assert processes[0].stdout is not None
        for line in processes[0].stdout:  # rank 0's log, until training has begun
            if re.search(r"iteration\s+1/", line):
                break
        else:
            raise AssertionError(f"rank 0 ended before training: {processes[0].communicate()[1][-3000:]}")
        stalled.send_signal(signal.SIGSTOP)
        outcomes = [p.communicate(timeout=RUN_TIMEOUT_S) for p in processes[:2]]
    finally:
        _kill(processes)
    for rank, (process, (_, stderr)) in enumerate(zip(processes[:2], outcomes)):
        assert process.returncode == 1, (rank, stderr[-3000:])
        found = re.search(rf"fcp train: error: rank {rank}: step (\d+): .* over the group of ranks \[([0-9, ]+)\] "
                          rf"failed within the {COMM_TIMEOUT_S} s communication timeout", stderr)
        assert found, (rank, stderr[-3000:])
        assert int(found.group(1)) >= 1
        assert 2 in [int(r) for r in found.group(2).split(",")]  # the group that waited holds the stalled rank
    status = json.loads((output / "run_status.json").read_text(encoding="utf-8"))
    assert status["status"] == "interrupted" and "communication timeout" in status["reason"]
    assert not (output / "result.json").exists()


def test_ranks_with_different_settings_stop_before_training_naming_the_keys(tmp_path: Path) -> None:
    same = _config(tmp_path, "same")
    other = _config(tmp_path, "other", lr=0.1)
    processes = _launch([same, same, other])
    try:
        outcomes = [p.communicate(timeout=RUN_TIMEOUT_S) for p in processes]
    finally:
        _kill(processes)
    for rank, (process, (stdout, stderr)) in enumerate(zip(processes, outcomes)):
        assert process.returncode == 2, (rank, stderr[-3000:])
        assert "ranks were started with different configurations" in stderr, (rank, stderr[-3000:])
        assert "optimizer.lr (ranks [0, 1]: 0.001; ranks [2]: 0.1)" in stderr, (rank, stderr[-3000:])
        assert "iteration" not in stdout
