"""`fcp overlay` never writes outside its target (links, dangling links, `..`), even with --force, and a
copy that fails part-way leaves the target as it was."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.commands import overlay_install
from mindspeed_mm.core.fcp.commands.fcp_overlay import default_source, overlay_files
from mindspeed_mm.core.fcp.commands.overlay_install import STAGING_PREFIX, OverlayEscapeError, resolve_inside

SOURCE = default_source()
DOC = Path("docs/zh/features/parallel/fcp.md")


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "MindSpeed-MM"
    (root / "mindspeed_mm").mkdir(parents=True)
    (root / "mindspeed_mm" / "__init__.py").write_text("# MindSpeed-MM package\n")
    (root / "examples" / "qwen3vl").mkdir(parents=True)
    (root / "examples" / "qwen3vl" / "finetune_qwen3vl_8B.sh").write_text("# existing recipe\n")
    return root


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def _snapshot(root: Path) -> dict[str, object]:
    """Every entry under `root` (links not followed): file contents, link targets, folders."""
    entries: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            entries[key] = ("link", os.readlink(path))
        elif path.is_file():
            entries[key] = path.read_bytes()
        else:
            entries[key] = "folder"
    return entries


@pytest.mark.parametrize("force", [False, True])
def test_a_folder_link_out_of_the_checkout_is_refused(checkout: Path, outside: Path, force: bool,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (checkout / "docs").symlink_to(outside, target_is_directory=True)
    before = _snapshot(checkout.parent)
    assert main(["overlay", str(checkout), *(["--force"] if force else [])]) == 2
    err = capsys.readouterr().err
    assert f"{DOC}: docs is a symbolic link out of the target (to {outside})" in err
    assert "nothing was copied" in err
    assert _snapshot(checkout.parent) == before


@pytest.mark.parametrize("force", [False, True])
def test_a_dangling_file_link_is_not_written_through(checkout: Path, outside: Path, force: bool,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (checkout / DOC).parent.mkdir(parents=True)
    (checkout / DOC).symlink_to(outside / "created_outside.md")
    before = _snapshot(checkout.parent)
    assert main(["overlay", str(checkout), *(["--force"] if force else [])]) == 2
    assert f"{DOC}: {DOC} is a dangling symbolic link" in capsys.readouterr().err
    assert _snapshot(checkout.parent) == before
    assert not (outside / "created_outside.md").exists()


def test_force_never_overwrites_a_file_outside_the_checkout(checkout: Path, outside: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    precious = outside / "precious.md"
    precious.write_text("keep me\n")
    (checkout / DOC).parent.mkdir(parents=True)
    (checkout / DOC).symlink_to(precious)
    assert main(["overlay", str(checkout), "--force"]) == 2
    assert f"{DOC}: {DOC} is a symbolic link out of the target (to {precious})" in capsys.readouterr().err
    assert precious.read_text() == "keep me\n"


def test_links_that_stay_inside_are_followed(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (checkout / "docs_real").mkdir()
    (checkout / "docs").symlink_to(checkout / "docs_real", target_is_directory=True)
    assert main(["overlay", str(checkout)]) == 0
    assert f"     copied  {DOC}" in capsys.readouterr().out
    assert (checkout / "docs").is_symlink()
    assert (checkout / "docs_real" / DOC.relative_to("docs")).read_bytes() == (SOURCE / DOC).read_bytes()


def test_dot_dot_absolute_and_non_files_are_refused(checkout: Path) -> None:
    target = checkout.resolve()
    for bad in (Path("../escape.txt"), Path("examples/../../escape.txt"), Path("/etc/passwd")):
        with pytest.raises(OverlayEscapeError, match="not a plain path inside the target"):
            resolve_inside(target, bad)
    (checkout / "examples" / "file").write_text("x")
    with pytest.raises(OverlayEscapeError, match="examples/file exists and is not a folder"):
        resolve_inside(target, Path("examples/file/inner.txt"))
    with pytest.raises(OverlayEscapeError, match="exists and is not a regular file"):
        resolve_inside(target, Path("examples/qwen3vl"))
    assert resolve_inside(target, Path("examples/qwen3vl/new.sh")) == target / "examples/qwen3vl/new.sh"


@pytest.mark.parametrize("fail_in", ["copy", "move"])
def test_a_copy_failing_part_way_leaves_the_checkout_as_it_was(checkout: Path, fail_in: str,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (checkout / DOC).parent.mkdir(parents=True)
    (checkout / DOC).write_text("local edits\n")  # overwritten with --force, then put back
    before = _snapshot(checkout)
    calls = {"n": 0}
    half = len(overlay_files(SOURCE)) // 2
    real = overlay_install.shutil.copy2 if fail_in == "copy" else overlay_install.os.replace

    def fails_half_way(src: object, dst: object) -> object:
        calls["n"] += 1
        if calls["n"] == half:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    if fail_in == "copy":
        monkeypatch.setattr(overlay_install.shutil, "copy2", fails_half_way)
    else:
        monkeypatch.setattr(overlay_install.os, "replace", fails_half_way)
    assert main(["overlay", str(checkout), "--force"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "the target was left as it was" in err
    monkeypatch.undo()
    assert calls["n"] == half
    assert _snapshot(checkout) == before
    assert not list(checkout.glob(f"{STAGING_PREFIX}*"))
