"""The CPU `npu_fusion_attention` answers to upstream's TND ring helpers: their merges of its blocks are exact.

`mindspeed_tnd_merge.py` runs in the upstream interpreter (upstream's helpers imported from the upstream
checkout, read-only): two key blocks merged by `forward_update_without_fused`, a ring update through
`tnd_out_update` with `get_selection_indices_for_tnd_softmax_update`, and each block's gradient from the merged
statistics. Every output, log-sum-exp and gradient must match float64 attention.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bed as bed_sources
from conftest import require_upstream

SCRIPT = Path(__file__).resolve().parent / "mindspeed_tnd_merge.py"


def test_upstream_tnd_helpers_merge_the_emulated_kernel_exactly() -> None:
    sources = bed_sources.find_sources()
    if not sources.available:
        if require_upstream():
            pytest.fail(f"FCP_REQUIRE_UPSTREAM is set: {sources.skip_reason()}", pytrace=False)
        pytest.skip(sources.skip_reason())
    env = dict(os.environ, MINDSPEED_MM_DIR=str(sources.mindspeed_mm), PYTHONPATH=os.pathsep.join(
        (str(bed_sources.CPU_ASCEND), str(sources.mindspeed), str(sources.megatron.parent))))
    done = subprocess.run([str(sources.python), str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, f"{SCRIPT.name} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"[upstream TND helpers] largest errors: {errors}", file=sys.stderr)
    assert len(errors) == 9
    bad = {name: value for name, value in errors.items() if not value < 1e-5}
    assert not bad, f"upstream's TND merge of the emulated kernel is off: {bad}"
