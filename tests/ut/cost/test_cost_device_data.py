"""The `h200` preset's compute terms against the H200 measurements of the project's device data.

The measurements live beside the project (`../shared/device/`, or `FCP_DEVICE_DATA_DIR`); the package
ships a copy that the preset is fitted to. Every term of the fit is scored on every measured row of its part,
in sample and held out (each row predicted by the fit of the others; each part's largest size by the fit of
the smaller ones, `cost.term_validation`): within 10% on average and 25% at the worst row held out, or,
for the terms named in `HELD_OUT_GAPS`, within the bound measured for them (so a regression fails). The
preset carries the fit. CI always has the data: `FCP_REQUIRE_UPSTREAM=1` turns its absence into a failure.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.analytic import Setup, time_figures
from mindspeed_mm.core.fcp.cost.measured_compute import (
    H200_QWEN3VL8B_FILE, TERM_NAMES, fit_errors, fit_measured_compute, load_rows, term_errors,
)
from mindspeed_mm.core.fcp.cost.presets import HARDWARE, MODELS, build_preset_table
from mindspeed_mm.core.fcp.cost.term_validation import (
    GOAL_MEAN, GOAL_WORST, device_held_out, matmul_rate_tflops, vision_flop_rate_tflops,
)

REPO = Path(__file__).resolve().parents[3]
DEVICE_FILE = "h200-qwen3vl8b-compute.jsonl"
HELD_OUT_GAPS = {
    # The call's host floor and its work meet at 4K tokens on 2 heads (1.1 ms each, 1.56 ms measured: -30%);
    # 2 heads per kernel at 32K leave it short of work (-15%). The rule has no per-degree constant to absorb
    # either (benchmarks/results/device_cost_terms.md).
    "Ulysses attention per degree (U)": (0.11, 0.31),
    # The call floor's two rows (64 and 256 patches) differ by 18%: each predicted from the other is off by
    # 15-18%; the calls above the floor are within 10% held out.
    "vision block call (HV)": (0.12, 0.19),
}
"""Terms short of the held-out goal: (mean, worst) bounds measured for them, with the reason."""


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


@pytest.fixture(scope="module")
def device_rows():
    return load_rows(_device_file())


@pytest.fixture(scope="module")
def held_out_terms(device_rows):
    return {t.term: t for t in device_held_out(*device_rows)}


def test_every_term_held_out_meets_the_goal_or_its_measured_bound(held_out_terms) -> None:
    assert sorted(held_out_terms) == sorted(TERM_NAMES.values())
    for term, scores in held_out_terms.items():
        print(f"{term}: in sample {100 * scores.in_sample.mean_abs_error:.1f}%, left out "
              f"{100 * scores.held_out_mean:.1f}% (worst {100 * scores.held_out_worst:.1f}%)")
        assert scores.in_sample.mean_abs_error <= GOAL_MEAN, term
        mean, worst = HELD_OUT_GAPS.get(term, (GOAL_MEAN, GOAL_WORST))
        assert scores.held_out_mean <= mean and scores.held_out_worst <= worst, (term, scores.leave_one_out.points)
        assert scores.meets_goal == (term not in HELD_OUT_GAPS), term
        # Every part was measured at more than one size: its largest is predicted from the smaller ones.
        assert scores.small_to_large is not None and scores.small_to_large.points


def test_the_held_out_scores_come_from_fits_that_did_not_see_the_row(device_rows, held_out_terms) -> None:
    """A row left out moves the fit: the left-out prediction of the largest linear row is the rate of the
    next largest carried on, not the row itself."""
    name, rows = device_rows
    linear = held_out_terms["linear (L)"]
    largest = max((r for r in rows if r.part == "L"), key=lambda r: r.fields["tokens"])
    point = next(p for p in linear.leave_one_out.points if p[0] == largest.line)
    rest = fit_measured_compute(name, [r for r in rows if r is not largest])
    assert point[3] == pytest.approx(rest.linear(largest.fields["tokens"]), rel=1e-12)
    assert point[3] != pytest.approx(point[2], rel=1e-3)


def test_the_h200_preset_carries_the_fit(device_rows) -> None:
    """The preset's table, read as the cost model reads it, gives the fit's time of every row; its linear term
    is the kernels' raised to the real model's host floor (so it exceeds L below that floor)."""
    name, rows = device_rows
    measured = fit_measured_compute(name, rows)
    table = build_preset_table("h200", "qwen3vl-8b", recompute="none")
    fitted = {e.term: e for e in fit_errors(measured, rows)}
    for error in term_errors(table.time, measured.layer_floor_ms, rows, vision_depth=MODELS["qwen3vl-8b"].encoder.depth):
        got = np.array([p[3] for p in error.points])
        want = np.array([p[3] for p in fitted[error.term].points])
        if error.term == "linear (L)":
            assert np.all(got >= want * (1 - 1e-12)) and got[-1] == pytest.approx(want[-1], rel=1e-9)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=error.term)
    assert table.time.attention_ulysses_ms is None   # a Ulysses rank: the full heads' work / d
    provenance = table.provenance["measured_compute"]
    assert provenance["file"] == H200_QWEN3VL8B_FILE and "lines" in provenance["attention"]


def test_the_vision_tail_is_no_faster_than_the_blocks_flops_allow(device_rows) -> None:
    """Beyond its measured patches the vision call goes on at its large-size slope: the FLOP rate that slope
    implies (vision block's matmuls and windowed attention, `cost.shapes`) stays below the GEMM rate the
    device reached (part A), and the real block is no faster per patch than the lean block measured (V)."""
    name, rows = device_rows
    measured = fit_measured_compute(name, rows)
    enc = MODELS["qwen3vl-8b"].encoder
    rate = vision_flop_rate_tflops(measured, enc)
    assert 0.05 * matmul_rate_tflops(rows) < rate < matmul_rate_tflops(rows)
    lean = max((r for r in rows if r.part == "V"), key=lambda r: r.fields["patches"]).fields
    assert measured.vision_line[1] >= lean["fb_ms_per_block"] / lean["patches"]
    big = 10 * max(measured.vision_patches)
    assert measured.vision_block(big) / big == pytest.approx(measured.vision_line[1], rel=0.01)


def test_the_analytic_terms_the_measurements_replace_were_far_off() -> None:
    """The same check on the analytic figures (what the preset said before it was measured) fails: the
    test can tell a wrong table from a right one."""
    _, rows = load_rows(_device_file())
    # The h200 preset before it was measured: analytic compute terms, 0.01 ms per attention call, 0.05 ms per layer.
    hw = dataclasses.replace(HARDWARE["h200"], attention_call_ms=0.01, launch_ms_per_layer=0.05,
                             vision_block_ms=None)
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
