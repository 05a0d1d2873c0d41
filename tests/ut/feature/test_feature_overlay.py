"""`fcp overlay PATH` on a temporary MindSpeed-MM-like checkout."""
from __future__ import annotations

from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.commands.fcp_overlay import ENTRY_LINE, default_source, overlay_files

SOURCE = default_source()


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "MindSpeed-MM"
    (root / "mindspeed_mm" / "models").mkdir(parents=True)
    (root / "mindspeed_mm" / "__init__.py").write_text("# MindSpeed-MM package\n")
    (root / "mindspeed_mm" / "models" / "qwen3vl.py").write_text("# a model\n")
    (root / "examples" / "qwen3vl").mkdir(parents=True)
    (root / "examples" / "qwen3vl" / "finetune_qwen3vl_8B.sh").write_text("# existing recipe\n")
    (root / "pretrain_transformers.py").write_text("import mindspeed.megatron_adaptor\n")
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_copies_fcp_files_only_and_reports_them(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _tree(checkout)
    assert main(["overlay", str(checkout)]) == 0
    out = capsys.readouterr().out
    files = overlay_files(SOURCE)
    relative = {str(f) for f in files}
    assert {"mindspeed_mm_fcp/feature.py", "mindspeed_mm/core/fcp/cli.py",
            "docs/zh/features/parallel/fcp.md", "docs/zh/features/parallel/images/fcp_plan_openvid_64.png",
            "examples/qwen3vl/finetune_qwen3vl_8B_fcp.sh", "examples/qwen3vl/qwen3vl_full_sft_8B_fcp.yaml"} <= relative
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in relative)
    after = _tree(checkout)
    for name, content in before.items():
        assert after[name] == content, f"{name} was changed"
    assert set(after) == set(before) | relative
    for f in files:
        assert (checkout / f).read_bytes() == (SOURCE / f).read_bytes()
    assert f"copied {len(files)} new and overwrote 0 file(s); 0 already up to date" in out
    assert ENTRY_LINE in out

    assert main(["overlay", str(checkout)]) == 0
    assert f"copied 0 new and overwrote 0 file(s); {len(files)} already up to date" in capsys.readouterr().out


def test_never_overwrites_a_different_file_without_force(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = checkout / "docs" / "zh" / "features" / "parallel" / "fcp.md"
    doc.parent.mkdir(parents=True)
    doc.write_text("local edits\n")
    assert main(["overlay", str(checkout)]) == 2
    err = capsys.readouterr().err
    assert "docs/zh/features/parallel/fcp.md" in err and "nothing was copied" in err and "--force" in err
    assert doc.read_text() == "local edits\n"
    assert not (checkout / "mindspeed_mm" / "features_manager").exists(), "a refused overlay copies nothing"

    assert main(["overlay", str(checkout), "--force"]) == 0
    assert "overwritten  docs/zh/features/parallel/fcp.md" in capsys.readouterr().out
    assert doc.read_bytes() == (SOURCE / "docs/zh/features/parallel/fcp.md").read_bytes()


def test_refuses_a_path_that_is_not_a_checkout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["overlay", str(tmp_path)]) == 2
    assert "does not look like a MindSpeed-MM checkout" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert main(["overlay", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "mindspeed_mm_fcp" / "register.py").is_file()


def test_dry_run_copies_nothing(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _tree(checkout)
    assert main(["overlay", str(checkout), "--dry-run"]) == 0
    assert "would copy" in capsys.readouterr().out
    assert _tree(checkout) == before


def test_missing_path_and_incomplete_source_are_named(tmp_path: Path, checkout: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["overlay", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["overlay", str(checkout), "--source", str(tmp_path / "nope")]) == 2
    assert "mindspeed_mm/core/fcp/ is missing" in capsys.readouterr().err
