"""Validation rounds, their checks and the predicted-vs-measured report."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.profiler.profile_config import model_shape
from mindspeed_mm.core.fcp.profiler.group_validation import (
    ValidationGroup,
    ValidationRound,
    ValidationSettings,
    build_report,
    check_rounds,
    default_rounds,
)

SHAPE = model_shape("tiny")   # 4 heads, 2 KV heads: Ulysses on 1, 2 and 4 ranks


def test_default_rounds_cover_every_degree_and_both_algos() -> None:
    rounds = default_rounds(4, SHAPE)
    check_rounds(rounds, 4, SHAPE)
    groups = [g for r in rounds for g in r.groups]
    assert len(groups) >= 24
    kinds = {(g.degree, g.algo if g.degree > 1 else "local") for g in groups}
    assert kinds >= {(1, "local"), (2, "ring"), (3, "ring"), (4, "ring"), (2, "ulysses"), (4, "ulysses")}
    assert (3, "ulysses") not in kinds
    for r in rounds:
        # Groups of a round carry the same tokens per rank, so no rank idles while others work.
        per_rank = {sum(g.lengths) / g.degree for g in r.groups}
        assert len(per_rank) == 1
    assert sum(len(g.lengths) >= 2 for g in groups) >= 0.9 * len(groups)   # mostly mixed packed batches
    assert default_rounds(4, SHAPE) == rounds                 # deterministic


@pytest.mark.parametrize(
    ("rounds", "message"),
    [
        ([], "at least one round"),
        ([ValidationRound((ValidationGroup((0, 1), "ring", (8,)),))], r"cover ranks \[0, 1\], expected each of 0..3"),
        ([ValidationRound((ValidationGroup((0, 1, 2), "ulysses", (8,)), ValidationGroup((3,), "ring", (8,))))],
         "ulysses cannot split 4 heads"),
        ([ValidationRound((ValidationGroup((0, 2), "ring", (8,)), ValidationGroup((1, 3), "ring", (8,))))],
         r"group ranks \[0, 2\] are not contiguous"),
        ([ValidationRound((ValidationGroup((0, 1, 2, 3), "zigzag", (8,)),))], "unknown algo 'zigzag'"),
        ([ValidationRound((ValidationGroup((0, 1, 2, 3), "hybrid", (8,)),))], "validation times ring and ulysses groups"),
        ([ValidationRound((ValidationGroup((0, 1, 2, 3), "ring", (8, 0)),))], "needs positive document lengths"),
    ],
)
def test_bad_rounds_are_refused(rounds: list[ValidationRound], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_rounds(rounds, 4, SHAPE)


def test_report_takes_each_groups_slowest_rank_and_computes_the_error() -> None:
    cost = CostModel.from_preset("cpu-tiny")
    rounds = [ValidationRound((ValidationGroup((0, 1), "ring", (40, 24)), ValidationGroup((2,), "ring", (30, 34)),
                               ValidationGroup((3,), "ulysses", (64,))))]
    predicted = [float(cost.group_time_ms(cost.workload(list(g.lengths)), g.degree, g.algo)) for g in rounds[0].groups]
    # Per rank, per round, per pass: rank 1 is the slow rank of the first group.
    per_rank = [[[predicted[0] * 0.5] * 3], [[predicted[0] * 1.25, predicted[0] * 1.25, predicted[0] * 5.0]],
                [[predicted[1] * 0.8] * 3], [[predicted[2]] * 3]]
    settings = ValidationSettings(passes=3, statistic="median")
    report = build_report(cost, rounds, per_rank, settings, 12.0, (1.0, 2.0, 3.0))
    errors = [c.error for c in report.cases]
    np.testing.assert_allclose(errors, [1 / 1.25 - 1, 1 / 0.8 - 1, 0.0])
    assert report.mape == pytest.approx(100 * (0.2 + 0.25 + 0.0) / 3)
    assert report.cases[0].samples_ms[2] == pytest.approx(predicted[0] * 5.0)
    doc = report.to_json()
    assert doc["cases"][2]["algo"] == "local" and doc["clock"] == "cpu" and doc["passes"] == 3
    lines = report.lines()
    assert lines[0].split()[:4] == ["round", "ranks", "d", "algo"]
    assert lines[-1].startswith(f"MAPE {report.mape:.1f}% over 3 cases (target <= 10%)")
    # The same measurements against a slower linear term: every prediction grows, the measurements stay.
    slow = CostModel(dataclasses.replace(cost.table, time=dataclasses.replace(
        cost.table.time, linear_ms_per_token=3 * cost.table.time.linear_ms_per_token)))
    again = report.repriced(slow)
    assert [c.measured_ms for c in again.cases] == [c.measured_ms for c in report.cases]
    assert all(a.predicted_ms > c.predicted_ms for a, c in zip(again.cases, report.cases))
    assert [a.predicted_ms for a in again.cases] == [
        float(slow.group_time_ms(slow.workload(list(g.lengths)), g.degree, g.algo)) for g in rounds[0].groups]


def test_validation_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="--validation-passes must be an int >= 1"):
        ValidationSettings(passes=0)
    with pytest.raises(ValueError, match="--validation-window-ms must be a number > 0"):
        ValidationSettings(window_ms=0)
    with pytest.raises(ValueError, match="--clock must be one of"):
        dataclasses.replace(ValidationSettings(), clock="tsc")
