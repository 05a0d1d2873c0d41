"""Held-out scoring (`cost.term_validation`): which rows each fit sees, and scores that tell an exact fit from a
wrong one."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.measured_compute import MeasuredRow, TermError
from mindspeed_mm.core.fcp.cost.presets import build_preset_table
from mindspeed_mm.core.fcp.cost.term_validation import (
    SHARES_FIT, held_out, table_held_out, ulysses_rule_errors, without_largest_sizes,
)

LENGTHS = (16.0, 32.0, 64.0, 128.0, 256.0)


def _row(line: int, part: str, **fields: float) -> MeasuredRow:
    return MeasuredRow(line, {"part": part, **fields})


def test_each_fit_sees_every_row_but_the_one_it_predicts_and_the_sizes_beyond() -> None:
    rows = [_row(1, "L", tokens=64), _row(2, "L", tokens=128), _row(3, "L", tokens=256),
            _row(4, "C", length=128), _row(5, "C", length=512), _row(6, "K", doc_len=128, docs=4),
            _row(7, "H", tokens=64), _row(8, "H", tokens=256), _row(9, "HV", patches=64), _row(10, "A", n=8)]
    seen: list[tuple[set[int], set[int]]] = []

    def errors(fit_rows, scored):
        seen.append(({r.line for r in fit_rows}, {r.line for r in scored}))
        return [TermError(r.part, [(r.line, "", 1.0, 1.0)]) for r in scored]

    held_out(rows, errors, SHARES_FIT, lambda r: float(r.fields[{"L": "tokens", "C": "length", "K": "doc_len",
                                                                   "H": "tokens", "HV": "patches"}[r.part]]))
    everything = {r.line for r in rows}
    in_sample, *rest = seen
    assert in_sample == (everything, everything - {10})           # part A is fitted by nothing here
    left_out = rest[:9]
    assert [scored for _, scored in left_out] == [{k} for k in range(1, 10)]
    assert all(fit == everything - scored for fit, scored in left_out)
    beyond = dict((frozenset(scored), fit) for fit, scored in rest[9:])
    # H's largest (256 tokens): L, the attention parts and H cut at 256 tokens; C at 512 its own size only.
    assert beyond[frozenset({8})] == everything - {3, 5, 8}
    assert beyond[frozenset({5})] == everything - {5}
    assert beyond[frozenset({3})] == everything - {3}
    assert frozenset({9}) not in beyond                            # one size only: nothing to extrapolate from


def _table_with(causal: Grid, linear: Grid, ulysses: dict[int, Grid] | None = None):
    table = build_preset_table("cpu", "tiny")
    time = dataclasses.replace(table.time, attention_causal_ms=causal, attention_off_diagonal_ms=None,
                               linear_ms=linear, attention_ulysses_ms=ulysses, vision_ms=None)
    return dataclasses.replace(table, time=time)


def _quadratic(alpha: float, beta: float, gamma: float, bump: dict[float, float] | None = None) -> Grid:
    return Grid(LENGTHS, tuple((alpha * s * s + beta * s + gamma) * (bump or {}).get(s, 1.0) for s in LENGTHS),
                "loglog")


def test_a_grid_on_its_own_curve_is_predicted_without_any_of_its_points() -> None:
    linear = Grid(LENGTHS, tuple(0.01 * s for s in LENGTHS), "linear")
    exact = {t.term: t for t in table_held_out(_table_with(_quadratic(1e-4, 2e-3, 0.5), linear))}
    assert set(exact) == {"attention, causal document", "linear work (layer)"}
    for t in exact.values():
        assert t.held_out_mean < 1e-6 and t.small_to_large.mean_abs_error < 1e-6 and t.meets_goal
    # One point 40% high: the fit without it misses it by about as much, and the fits of the others move.
    bumped = {t.term: t for t in table_held_out(_table_with(_quadratic(1e-4, 2e-3, 0.5, {64.0: 1.4}), linear))}
    attention = bumped["attention, causal document"]
    errors = dict((line, p / m - 1) for line, _, m, p in attention.leave_one_out.points)
    assert errors[2] == pytest.approx(1 / 1.4 - 1, abs=0.02)
    assert attention.held_out_mean > 0.05 and not attention.meets_goal


def test_the_ulysses_rule_is_scored_against_the_measured_degrees() -> None:
    alpha, beta, gamma = 1e-4, 2e-3, 0.5
    linear = Grid(LENGTHS, tuple(0.01 * s for s in LENGTHS), "linear")
    rule = {2: Grid(LENGTHS, tuple((alpha * s * s + beta * s) / 2 + gamma for s in LENGTHS), "loglog")}
    table = _table_with(_quadratic(alpha, beta, gamma), linear, rule)
    assert ulysses_rule_errors(table).mean_abs_error < 1e-6
    slower = {2: Grid(LENGTHS, tuple(1.2 * y for y in rule[2].y), "loglog")}
    errors = ulysses_rule_errors(_table_with(_quadratic(alpha, beta, gamma), linear, slower)).relative_errors
    np.testing.assert_allclose(errors, 1 / 1.2 - 1, atol=1e-6)
    assert ulysses_rule_errors(_table_with(_quadratic(alpha, beta, gamma), linear)) is None


def test_the_cut_table_drops_each_grids_largest_size() -> None:
    linear = Grid(LENGTHS, tuple(0.01 * s for s in LENGTHS), "linear")
    table = _table_with(_quadratic(1e-4, 2e-3, 0.5), linear, {2: _quadratic(5e-5, 1e-3, 0.5)})
    cut = without_largest_sizes(table).time
    assert cut.attention_causal_ms.x == LENGTHS[:-1] and cut.linear_ms.x == LENGTHS[:-1]
    assert cut.attention_ulysses_ms[2].x == LENGTHS[:-1]
    assert cut.attention_full_ms.x == table.time.attention_full_ms.x[:-1]
