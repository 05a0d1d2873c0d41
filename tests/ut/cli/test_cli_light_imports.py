"""`fcp --help`, `fcp plan` and `fcp overlay` load neither torch nor scipy (`fcp plan` numpy only): they run where a
planner or an installer runs, and the other commands' modules are not imported for them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cli import COMMAND_MODULES, SUMMARIES, build_parser, command_name

HEAVY = ("torch", "scipy", "megatron", "matplotlib")


def loaded_after(argv: list[str], cwd: Path) -> dict:
    code = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from mindspeed_mm.core.fcp.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main({argv!r})
        roots = {{name.split(".")[0] for name in sys.modules}}
        print(json.dumps({{"code": code, "loaded": sorted(roots & {set(HEAVY + ("numpy",))!r})}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"], ["overlay", "--help"]])
def test_help_imports_neither_torch_nor_scipy(argv: list[str], tmp_path: Path) -> None:
    result = loaded_after(argv, tmp_path)
    assert result["code"] == 0 and not set(result["loaded"]) & set(HEAVY), result


def test_plan_and_overlay_run_without_torch_or_scipy(tmp_path: Path) -> None:
    planned = loaded_after(["plan", "--dataset", "internvid", "--batch-size", "32", "--ranks", "8"], tmp_path)
    assert planned == {"code": 0, "loaded": ["numpy"]}
    checkout = tmp_path / "MindSpeed-MM"
    for folder in ("mindspeed_mm", "examples"):
        (checkout / folder).mkdir(parents=True)
    (checkout / "pretrain_transformers.py").write_text("import mindspeed.megatron_adaptor\n")
    assert loaded_after(["overlay", str(checkout)], tmp_path) == {"code": 0, "loaded": []}
    assert (checkout / "mindspeed_mm" / "features_manager" / "fcp" / "model_adapter.py").is_file()


def test_the_listing_summaries_are_the_commands_own_help() -> None:
    parser = build_parser()
    actions = parser._subparsers._group_actions[0]._choices_actions
    assert {action.dest: action.help for action in actions} == {
        command_name(m): SUMMARIES[command_name(m)] for m in COMMAND_MODULES}
