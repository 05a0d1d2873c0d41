"""The CPU `npu_fusion_attention` answers to upstream's TND ring helpers: their merges of its blocks are exact.

`mindspeed_tnd_merge.py` runs in the upstream interpreter (upstream's helpers imported from the upstream
checkout, read-only): two key blocks merged by `forward_update_without_fused`, a ring update through
`tnd_out_update` with `get_selection_indices_for_tnd_softmax_update`, and each block's gradient from the merged
statistics. Every output, log-sum-exp and gradient must match float64 attention.
"""
from __future__ import annotations

import sys
from pathlib import Path

from conftest import run_upstream_script

SCRIPT = Path(__file__).resolve().parent / "mindspeed_tnd_merge.py"


def test_upstream_tnd_helpers_merge_the_emulated_kernel_exactly() -> None:
    errors = run_upstream_script(SCRIPT, timeout_s=300)
    print(f"[upstream TND helpers] largest errors: {errors}", file=sys.stderr)
    assert len(errors) == 9
    bad = {name: value for name, value in errors.items() if not value < 1e-5}
    assert not bad, f"upstream's TND merge of the emulated kernel is off: {bad}"
