"""Session fixtures of the upstream bed: skipped without an upstream stack, failing with FCP_REQUIRE_UPSTREAM=1."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import BedUnavailable, UpstreamBed  # noqa: E402


def require_upstream() -> bool:
    return os.environ.get("FCP_REQUIRE_UPSTREAM", "") not in ("", "0")


@pytest.fixture(scope="session")
def upstream_bed(tmp_path_factory) -> UpstreamBed:
    """The session's bed (tiny model and dataset built once; checkouts assembled on first use)."""
    try:
        return UpstreamBed.create(tmp_path_factory.mktemp("upstream_bed"))
    except BedUnavailable as missing:
        if require_upstream():
            pytest.fail(f"FCP_REQUIRE_UPSTREAM is set: {missing}", pytrace=False)
        pytest.skip(str(missing))
