"""The CPU MoE operators answer to MindSpeed-MM's fused expert path: it computes what its plain-torch path does.

`mindspeed_moe_experts.py` runs in the upstream interpreter (upstream's modules imported from the upstream
checkout, read-only): Qwen3-VL-MoE's plain experts, its NPU-fused experts and `fused_ep_forward` on the same
weights and routing. Outputs and every gradient (input, routing weights, both expert weights) must agree in float64.
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

SCRIPT = Path(__file__).resolve().parent / "mindspeed_moe_experts.py"


def test_upstream_fused_experts_on_the_cpu_operators_match_its_plain_experts() -> None:
    sources = bed_sources.find_sources()
    if not sources.available:
        if require_upstream():
            pytest.fail(f"FCP_REQUIRE_UPSTREAM is set: {sources.skip_reason()}", pytrace=False)
        pytest.skip(sources.skip_reason())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(bed_sources.CPU_ASCEND), str(sources.mindspeed),
                                                       str(sources.megatron.parent), str(sources.mindspeed_mm))))
    done = subprocess.run([str(sources.python), str(SCRIPT)], capture_output=True, text=True, env=env, timeout=600,
                          check=False, cwd=str(SCRIPT.parent))
    assert done.returncode == 0, f"{SCRIPT.name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"[upstream MoE experts] largest errors: {errors}", file=sys.stderr)
    assert errors.pop("ops_called") == 1.0, "the fused path did not run through the CPU MoE operators"
    assert len(errors) == 10
    bad = {name: value for name, value in errors.items() if not value < 1e-10}
    assert not bad, f"upstream's fused experts on the CPU operators differ from its plain experts: {bad}"
