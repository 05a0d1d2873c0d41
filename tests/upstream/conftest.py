"""Session fixtures of the upstream bed: skipped without an upstream stack, failing with FCP_REQUIRE_UPSTREAM=1."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bed as bed_sources  # noqa: E402
from harness import BedUnavailable, UpstreamBed  # noqa: E402


def require_upstream() -> bool:
    return os.environ.get("FCP_REQUIRE_UPSTREAM", "") not in ("", "0")


def unavailable(reason: str) -> NoReturn:
    """Skips the test for want of the upstream stack, or fails it when FCP_REQUIRE_UPSTREAM is set."""
    if require_upstream():
        pytest.fail(f"FCP_REQUIRE_UPSTREAM is set: {reason}", pytrace=False)
    pytest.skip(reason)


def bed_or_skip(root: Path, **options: bool) -> UpstreamBed:
    """`UpstreamBed.create(root, **options)`, or `unavailable` with the reason."""
    try:
        return UpstreamBed.create(root, **options)
    except BedUnavailable as missing:
        unavailable(str(missing))


def run_upstream_script(script: Path, extra_path: tuple[Path, ...] = (), timeout_s: float = 600) -> dict:
    """Runs `script` in the upstream interpreter with the CPU Ascend surface, MindSpeed and Megatron-LM (and
    `extra_path`) on its path; returns the JSON object it prints last."""
    sources = bed_sources.find_sources()
    if not sources.available:
        unavailable(sources.skip_reason())
    path = (bed_sources.CPU_ASCEND, sources.mindspeed, sources.megatron.parent, *extra_path)
    env = dict(os.environ, MINDSPEED_MM_DIR=str(sources.mindspeed_mm),
               PYTHONPATH=os.pathsep.join(str(p) for p in path))
    done = subprocess.run([str(sources.python), str(script)], capture_output=True, text=True, env=env,
                          timeout=timeout_s, check=False, cwd=str(script.parent))
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def upstream_bed(tmp_path_factory) -> UpstreamBed:
    """The session's bed (tiny model and dataset built once; checkouts assembled on first use)."""
    return bed_or_skip(tmp_path_factory.mktemp("upstream_bed"))
