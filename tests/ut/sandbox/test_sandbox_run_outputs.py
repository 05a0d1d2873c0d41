"""`fcp train --output-dir`: checked before training, atomic files, a run status, a killed save loses nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.sandbox import run_outputs
from mindspeed_mm.core.fcp.sandbox.results import TrainResult
from mindspeed_mm.core.fcp.sandbox.run_outputs import (
    FINAL_STATE_FILE,
    RESULT_FILE,
    STATUS_FILE,
    IncompleteRunError,
    OutputDirError,
    RunOutputs,
    load_result,
    read_status,
)


def _result(algo: str = "fcp_cp_algo") -> TrainResult:
    return TrainResult(context_parallel_algo=algo, world_size=2, async_planning=True)


def _complete_run(folder: Path, value: float) -> RunOutputs:
    outputs = RunOutputs(folder)
    outputs.start()
    outputs.save(_result(), {"w": torch.full((3,), value)})
    return outputs


@pytest.mark.parametrize("make", ["file", "file_parent", "folder_named_like_an_output"])
def test_an_unusable_output_dir_is_refused_before_anything_is_written(tmp_path: Path, make: str) -> None:
    if make == "file":
        target = tmp_path / "out"
        target.write_text("not a folder")
        message = f"--output-dir {target}: exists and is not a folder"
    elif make == "file_parent":
        (tmp_path / "file").write_text("x")
        target = tmp_path / "file" / "out"
        message = f"--output-dir {target}: {tmp_path / 'file'} is not a folder"
    else:
        target = tmp_path / "out"
        (target / RESULT_FILE).mkdir(parents=True)
        message = f"--output-dir {target}: {RESULT_FILE} there is a folder"
    with pytest.raises(OutputDirError) as err:
        RunOutputs(target).start()
    assert str(err.value) == message


def test_train_with_a_file_as_output_dir_stops_before_the_first_step(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out"
    target.write_text("not a folder")
    assert main(["train", "tiny_qwen3_fcp", "--reference", "--cpu", "--output-dir", str(target)]) == 2
    captured = capsys.readouterr()
    assert f"--output-dir {target}: exists and is not a folder" in captured.err
    assert "iteration" not in captured.out
    assert target.read_text() == "not a folder"


def test_a_complete_run_writes_status_state_and_result_with_one_run_id(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        outputs = _complete_run(tmp_path, 1.0)
    finally:
        os.umask(previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([FINAL_STATE_FILE, RESULT_FILE, STATUS_FILE])
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in tmp_path.iterdir())
    assert read_status(tmp_path) == {"status": "complete", "run_id": outputs.run_id, "reason": None}
    result = load_result(tmp_path)
    assert result["run_id"] == outputs.run_id and result["context_parallel_algo"] == "fcp_cp_algo"
    assert torch.equal(torch.load(tmp_path / FINAL_STATE_FILE)["w"], torch.full((3,), 1.0))


def test_a_started_run_marks_the_folder_interrupted_until_it_completes(tmp_path: Path) -> None:
    _complete_run(tmp_path, 1.0)
    second = RunOutputs(tmp_path)
    second.start()
    assert read_status(tmp_path)["status"] == "interrupted"
    with pytest.raises(IncompleteRunError, match="the last run did not complete"):
        load_result(tmp_path)
    second.interrupted("step 3: gradient all-reduce failed")
    assert read_status(tmp_path)["reason"] == "step 3: gradient all-reduce failed"


def test_a_result_of_another_run_is_not_taken_for_the_complete_one(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _complete_run(tmp_path, 1.0)
    write = run_outputs.atomic_write_text

    def killed_before_the_result(path: Path, text: str) -> None:
        if Path(path).name == RESULT_FILE:
            raise KeyboardInterrupt
        write(path, text)

    monkeypatch.setattr(run_outputs, "atomic_write_text", killed_before_the_result)
    second = RunOutputs(tmp_path)
    second.start()
    with pytest.raises(KeyboardInterrupt):
        second.save(_result(), {"w": torch.zeros(3)})
    assert read_status(tmp_path) == {"status": "complete", "run_id": second.run_id, "reason": None}
    with pytest.raises(IncompleteRunError, match="belongs to another run"):
        load_result(tmp_path)


_KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import torch
    from mindspeed_mm.core.fcp.sandbox.results import TrainResult
    from mindspeed_mm.core.fcp.sandbox.run_outputs import RunOutputs

    def dies_half_way(obj, handle):
        handle.write(b"partial")
        handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    outputs = RunOutputs(Path(sys.argv[1]))
    outputs.start()
    torch.save = dies_half_way
    outputs.save(TrainResult("fcp_cp_algo", 2, True), {"w": torch.zeros(3)})
""")


def test_a_run_killed_while_saving_leaves_the_previous_files_whole(tmp_path: Path) -> None:
    first = _complete_run(tmp_path, 1.0)
    done = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == -9, done.stderr
    # The previous parameters and result are intact; the status says the last run was interrupted.
    assert torch.equal(torch.load(tmp_path / FINAL_STATE_FILE)["w"], torch.full((3,), 1.0))
    assert json.loads((tmp_path / RESULT_FILE).read_text())["run_id"] == first.run_id
    assert read_status(tmp_path)["status"] == "interrupted"
    with pytest.raises(IncompleteRunError):
        load_result(tmp_path)
    # The killed writer's temporary file is removed by the next run's start.
    assert [p.name for p in tmp_path.glob(f".{FINAL_STATE_FILE}.*.tmp")]
    RunOutputs(tmp_path).start()
    assert not list(tmp_path.glob(".*.tmp"))
