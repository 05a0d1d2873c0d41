"""The `h200` preset's compute terms against the H200 measurements of the project's device data.

The measurements live beside the project (`../shared/device/`, or `FCP_DEVICE_DATA_DIR`); the package
ships a copy that the preset is fitted to. Every term of the preset is evaluated at every measured row
of its part and must be within 10% on average (the worst row is printed). CI always has the data:
`FCP_REQUIRE_UPSTREAM=1` turns its absence into a failure.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.analytic import Setup, time_figures
from mindspeed_mm.core.fcp.cost.measured_compute import (
    H200_QWEN3VL8B_FILE, fit_measured_compute, load_rows, term_errors,
)
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS, build_preset_table

REPO = Path(__file__).resolve().parents[3]
DEVICE_FILE = "h200-qwen3vl8b-compute.jsonl"
MAX_MEAN_ERROR = 0.10
TERMS = ("linear (L)", "attention, one document (C)", "attention, packed documents (K)",
         "ring off-diagonal block (B)", "Ulysses attention per degree (U)", "vision block call (HV)",
         "real model's layer (H)")


def _device_file() -> Path:
    folder = Path(os.environ.get("FCP_DEVICE_DATA_DIR", REPO.parent / "shared" / "device"))
    path = folder / DEVICE_FILE
    if not path.is_file():
        if os.environ.get("FCP_REQUIRE_UPSTREAM") == "1":
            pytest.fail(f"{path} is missing; CI must have the project's device data")
        pytest.skip(f"no device data at {path} (set FCP_DEVICE_DATA_DIR)")
    return path


def test_the_packaged_measurements_are_the_device_data() -> None:
    _, device = load_rows(_device_file())
    _, packaged = load_rows()
    assert [r.fields for r in packaged] == [r.fields for r in device]


def test_every_compute_term_of_the_h200_preset_is_within_ten_percent_of_the_device() -> None:
    name, rows = load_rows(_device_file())
    measured = fit_measured_compute(name, rows)
    table = build_preset_table("h200", "qwen3vl-8b", recompute="none")
    errors = {e.term: e for e in term_errors(table.time, measured.layer_floor_ms, rows,
                                             vision_depth=MODELS["qwen3vl-8b"].encoder.depth,
                                             model_overhead_ms=measured.model_overhead_ms)}
    assert sorted(errors) == sorted(TERMS)
    for term, error in errors.items():
        line, row, worst = error.worst
        print(f"{term}: mean |error| {100 * error.mean_abs_error:.1f}% over {len(error.points)} rows, "
              f"worst {100 * worst:+.1f}% ({row}, line {line})")
        assert error.mean_abs_error <= MAX_MEAN_ERROR, (term, error.points)
    # The table says where each term comes from.
    provenance = table.provenance["measured_compute"]
    assert provenance["file"] == H200_QWEN3VL8B_FILE and "lines" in provenance["attention"]


def test_the_analytic_terms_the_measurements_replace_were_far_off() -> None:
    """The same check on the analytic figures (what the preset said before it was measured) fails: the
    test can tell a wrong table from a right one."""
    _, rows = load_rows(_device_file())
    # The h200 preset before it was measured: analytic compute terms, 0.01 ms per attention call, 0.05 ms per layer.
    hw = dataclasses.replace(HARDWARE["h200"], attention_call_ms=0.01, launch_ms_per_layer=0.05)
    analytic = time_figures(hw, MODELS["qwen3vl-8b"], Setup(1, 1, "bf16", "none", "fsdp", 8))
    errors = term_errors(analytic, hw.launch_ms_per_layer, rows, vision_depth=MODELS["qwen3vl-8b"].encoder.depth)
    assert all(e.mean_abs_error > 0.3 for e in errors), [(e.term, e.mean_abs_error) for e in errors]


def test_the_fixed_cost_of_a_call_is_shared_by_its_documents() -> None:
    """32,768 tokens in 256 documents of 128 cost 2.7 ms in one call on the device (part K), one document of
    128 tokens 1.2 ms (part C); a model that put the call's fixed cost on every document would predict
    hundreds of ms for the packed call."""
    cost = CostModel.from_preset("h200-qwen3vl-8b", recompute="none")
    coefficients = cost.coefficients
    layers = cost.table.layers_per_stage
    alpha, beta, gamma = coefficients.attention_fit
    call = coefficients.attention_call_ms / layers

    def one_call(docs: int, length: int) -> float:
        return max(call, docs * (alpha * length * length + beta * length + gamma))

    assert one_call(256, 128) == pytest.approx(2.7433, rel=0.10)
    assert one_call(1, 128) == pytest.approx(1.2093, rel=0.15)   # the floor: 1.14-1.22 ms measured up to 2K tokens
    assert 256 * one_call(1, 128) > 50 * one_call(256, 128)


def test_other_tp_sizes_keep_the_analytic_compute_terms() -> None:
    """Only the measured shape (TP 1, bf16) takes the measured terms."""
    measured = build_preset_table("h200", "qwen3vl-8b")
    tp2 = build_preset_table("h200", "qwen3vl-8b", tp=2)
    assert measured.time.linear_ms is not None and "measured_compute" in measured.provenance
    assert tp2.time.linear_ms is None and "measured_compute" not in tp2.provenance
