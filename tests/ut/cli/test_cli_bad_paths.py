"""Output paths and length files that cannot work are refused at once, with the option or sample named."""
from __future__ import annotations

from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cli import main

SMALL = ["--ranks", "8", "--preset", "a3-qwen3vl-8b", "--batch-size", "16"]
TOO_LONG = 2**63  # one above int64


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("folder", "--gantt {p}: is a folder; give an image file name, e.g. {p}/plan.png"),
        ("missing/plan.png", "--gantt {p}: folder {parent} does not exist"),
        ("plan", "--gantt {p}: give the file name with its image suffix, e.g. {p}.png"),
    ],
)
def test_gantt_path_that_matplotlib_would_not_write_as_given(name: str, message: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    assert main(["plan", "--gantt", str(path), *SMALL]) == 2
    assert message.format(p=path, parent=path.parent) in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["folder"] if name == "folder" else [])


def test_simulate_plot_into_a_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--plot", str(tmp_path), "--ranks", "8", "--batches", "1"]) == 2
    assert f"--plot {tmp_path}: is a folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "where"),
    [(f"12\n{TOO_LONG}\n30\n", ":2"), (f"[12, 40, {TOO_LONG}]", ": item 2")],
)
def test_a_length_above_int64_names_its_sample(text: str, where: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    lengths = tmp_path / "lengths.txt"
    lengths.write_text(text)
    assert main(["plan", "--lengths", str(lengths), "--ranks", "8", "--preset", "a3-qwen3vl-8b"]) == 2
    err = capsys.readouterr().err
    assert f"{lengths}{where}: sample length {TOO_LONG} exceeds the largest supported length {TOO_LONG - 1}" in err
    assert "Traceback" not in err
