"""The error the reports read their margins against (`cost.model_error`)."""
from __future__ import annotations

import pytest

from mindspeed_mm.core.fcp.cost.model_error import margin_verdict, model_error
from mindspeed_mm.core.fcp.cost.presets import preset_table
from mindspeed_mm.core.fcp.cost.term_validation import GOAL_MEAN, packaged_held_out


def test_a_measured_table_reads_against_its_largest_held_out_term() -> None:
    error = model_error(preset_table("h200-qwen3vl-8b"))
    worst = max(packaged_held_out(), key=lambda t: t.held_out_mean)
    assert error.held_out_mean == pytest.approx(worst.held_out_mean) and error.term == worst.term
    assert 0.5 * GOAL_MEAN < error.held_out_mean < 2 * GOAL_MEAN
    assert margin_verdict(error.held_out_mean / 2, error) == "inside the model's error"
    assert margin_verdict(-2 * error.held_out_mean, error) == "beyond the model's error"
    assert "miss rows they did not see" in error.describe()


def test_an_analytic_table_has_no_known_error() -> None:
    for name in ("a3-qwen3vl-8b", "h100-qwen3vl-8b", "cpu-tiny"):
        error = model_error(preset_table(name))
        assert error.held_out_mean is None and "not measured on this hardware" in error.term
        assert margin_verdict(0.5, error) == "model error unknown"
    # Another TP size of the H200 keeps the analytic terms: unknown too.
    assert model_error(preset_table("h200-qwen3vl-8b", tp=2)).held_out_mean is None
