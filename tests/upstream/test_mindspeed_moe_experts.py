"""The CPU MoE operators answer to MindSpeed-MM's fused expert path: it computes what its plain-torch path does.

`mindspeed_moe_experts.py` runs in the upstream interpreter (upstream's modules imported from the upstream
checkout, read-only): Qwen3-VL-MoE's plain experts, its NPU-fused experts and `fused_ep_forward` on the same
weights and routing. Outputs and every gradient (input, routing weights, both expert weights) must agree in float64.
"""
from __future__ import annotations

import sys
from pathlib import Path

import bed as bed_sources
from conftest import run_upstream_script

SCRIPT = Path(__file__).resolve().parent / "mindspeed_moe_experts.py"


def test_upstream_fused_experts_on_the_cpu_operators_match_its_plain_experts() -> None:
    errors = run_upstream_script(SCRIPT, extra_path=(bed_sources.find_sources().mindspeed_mm,))
    print(f"[upstream MoE experts] largest errors: {errors}", file=sys.stderr)
    assert errors.pop("ops_called") == 1.0, "the fused path did not run through the CPU MoE operators"
    assert len(errors) == 10
    bad = {name: value for name, value in errors.items() if not value < 1e-10}
    assert not bad, f"upstream's fused experts on the CPU operators differ from its plain experts: {bad}"
