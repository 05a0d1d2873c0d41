"""Where the upstream stack is, and a writable checkout assembled from it the way upstream's installer does.

Sources (first match wins):
- `FCP_MINDSPEED_MM_DIR`, `FCP_MINDSPEED_DIR`, `FCP_MEGATRON_DIR`: a user's own checkouts (`FCP_MEGATRON_DIR` is the
  Megatron-LM root or its `megatron/` folder); each one overrides the matching folder below.
- `FCP_UPSTREAM_DIR`: a folder laid out like `shared/upstream` (`MindSpeed-MM/`, `MindSpeed/`, `Megatron-LM/megatron`).
- default: `<repo>/../shared/upstream`.
Interpreter: `FCP_UPSTREAM_PYTHON`, default `<repo>/.venv-upstream/bin/python`.
When something is missing, `UpstreamSources.missing` says what and the tests skip (or fail with
`FCP_REQUIRE_UPSTREAM=1`).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CPU_ASCEND = Path(__file__).resolve().parent / "cpu_ascend"
ENV_VARS = ("FCP_UPSTREAM_DIR", "FCP_MINDSPEED_MM_DIR", "FCP_MINDSPEED_DIR", "FCP_MEGATRON_DIR", "FCP_UPSTREAM_PYTHON")
ENTRY = "pretrain_transformers.py"
ADAPTOR_IMPORT = "import mindspeed.megatron_adaptor"


@dataclass(frozen=True)
class UpstreamSources:
    """The three upstream trees and the interpreter that runs them."""

    mindspeed_mm: Path
    mindspeed: Path
    megatron: Path
    """The `megatron/` package folder."""
    python: Path
    missing: tuple[str, ...] = field(default=())
    """Human-readable reasons why the bed cannot run (empty when it can)."""

    @property
    def available(self) -> bool:
        return not self.missing

    def skip_reason(self) -> str:
        return ("upstream MindSpeed-MM stack not usable: " + "; ".join(self.missing)
                + f". Set {', '.join(ENV_VARS[:4])} (see tests/upstream/README.md) and {ENV_VARS[4]}"
                " (make upstream-venv builds the default one).")


def _env_path(name: str) -> Path | None:
    """The path in env var `name`, absolute but with symlinks kept: a virtual environment's `bin/python` is a
    symlink, and resolving it would lose the environment's packages."""
    value = os.environ.get(name)
    return Path(os.path.abspath(Path(value).expanduser())) if value else None


def find_sources() -> UpstreamSources:
    base = _env_path("FCP_UPSTREAM_DIR") or (REPO.parent / "shared" / "upstream")
    mm = _env_path("FCP_MINDSPEED_MM_DIR") or base / "MindSpeed-MM"
    ms = _env_path("FCP_MINDSPEED_DIR") or base / "MindSpeed"
    meg = _env_path("FCP_MEGATRON_DIR") or base / "Megatron-LM"
    if (meg / "megatron").is_dir():
        meg = meg / "megatron"
    python = _env_path("FCP_UPSTREAM_PYTHON") or REPO / ".venv-upstream" / "bin" / "python"
    missing = []
    if not (mm / ENTRY).is_file():
        missing.append(f"no MindSpeed-MM checkout with {ENTRY} at {mm}")
    if not (ms / "mindspeed" / "megatron_adaptor.py").is_file():
        missing.append(f"no MindSpeed checkout (mindspeed/megatron_adaptor.py) at {ms}")
    if not (meg / "core" / "__init__.py").is_file():
        missing.append(f"no Megatron-LM megatron/ package at {meg}")
    if not python.is_file():
        missing.append(f"no upstream interpreter at {python}")
    return UpstreamSources(mm, ms, meg, python, tuple(missing))


@dataclass(frozen=True)
class Checkout:
    """An assembled, writable MindSpeed-MM checkout with FCP overlaid."""

    root: Path
    sources: UpstreamSources
    register_fcp: bool
    overlay_log: str

    def pythonpath(self) -> str:
        """PYTHONPATH of launched processes: the CPU Ascend surface, the checkout, MindSpeed."""
        return os.pathsep.join((str(CPU_ASCEND), str(self.root), str(self.sources.mindspeed)))


def add_registration_line(entry: Path, line: str) -> None:
    """The user's one documented edit: `line` right before `import mindspeed.megatron_adaptor`."""
    text = entry.read_text()
    lines = text.splitlines(keepends=True)
    for i, current in enumerate(lines):
        if current.strip() == ADAPTOR_IMPORT:
            indent = current[: len(current) - len(current.lstrip())]
            lines.insert(i, f"{indent}{line}\n")
            entry.write_text("".join(lines))
            return
    raise ValueError(f"{entry} has no line `{ADAPTOR_IMPORT}` to register FCP before")


def overlay_fcp(root: Path, python: Path) -> str:
    """Run `fcp overlay <root>` from `python`, the upstream interpreter, as a MindSpeed-MM user would: that
    interpreter has no megatron-core package (MindSpeed-MM keeps Megatron in its checkout root), so this
    fails if any `fcp` command needs it to start. Run outside the checkout, whose `megatron/` would hide that."""
    command = [str(python), "-m", "mindspeed_mm.core.fcp.cli", "overlay", str(root)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False,
                          cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def assemble_checkout(sources: UpstreamSources, target: Path, *, register_fcp: bool = False,
                      overlay: bool = True) -> Checkout:
    """Copy MindSpeed-MM to `target`, Megatron's `megatron/` into its root, overlay FCP, optionally register it."""
    if not sources.available:
        raise RuntimeError(sources.skip_reason())
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")
    shutil.copytree(sources.mindspeed_mm, target, ignore=ignore, symlinks=True)
    shutil.copytree(sources.megatron, target / "megatron", ignore=ignore, symlinks=True)
    log = overlay_fcp(target, sources.python) if overlay else ""
    if register_fcp:
        from mindspeed_mm.core.fcp.commands.fcp_overlay import ENTRY_LINE

        add_registration_line(target / ENTRY, ENTRY_LINE)
    return Checkout(target, sources, register_fcp, log)


def main(argv: list[str]) -> int:
    """`python tests/upstream/bed.py mindspeed-dir`: print the MindSpeed checkout when the upstream sources are all
    there (exit 0), else why not (exit 1). The Makefile uses it to decide whether to build the bed's interpreter
    and to run the feature tests against the real MindSpeed."""
    if argv != ["mindspeed-dir"]:
        sys.stderr.write("usage: bed.py mindspeed-dir\n")
        return 2
    sources = find_sources()
    missing = [reason for reason in sources.missing if not reason.startswith("no upstream interpreter")]
    if missing:
        sys.stderr.write(sources.skip_reason() + "\n")
        return 1
    print(sources.mindspeed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
