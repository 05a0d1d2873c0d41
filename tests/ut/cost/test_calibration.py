"""Online recalibration: smoothing, JSON state, the calibrated cost model, and wrong coefficients corrected."""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable
from mindspeed_mm.core.fcp.cost.calibration import (
    CalibratedCostModel,
    CalibrationSettings,
    CorrectionTable,
    OnlineCalibrator,
    observe_groups,
    observe_round,
)
from mindspeed_mm.core.fcp.solver import SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.planner import plan_batch

DEGREES = np.arange(1, 9)


def base_model(**replace_time: Any) -> CostModel:
    table = CostModel.from_preset("cpu-tiny").table
    if replace_time:
        table = dataclasses.replace(table, time=dataclasses.replace(table.time, **replace_time))
    return CostModel(table, max_tokens_per_rank=4096)


def test_smoothing_in_log_space_with_clipping_and_a_pooled_default() -> None:
    calibrator = OnlineCalibrator(CalibrationSettings(smoothing=0.5, min_factor=0.25, max_factor=4.0))
    calibrator.observe(2, "ring", 10.0, 20.0)            # first observation: taken as is
    assert calibrator.snapshot().factor(2, "ring") == pytest.approx(2.0)
    calibrator.observe(2, "ring", 10.0, 5.0)             # log-space mean of 2 and 0.5
    assert calibrator.snapshot().factor(2, "ring") == pytest.approx(1.0)
    calibrator.observe(4, "ulysses", 1.0, 1000.0)        # clipped to max_factor
    table = calibrator.snapshot()
    assert table.factor(4, "ulysses") == pytest.approx(4.0)
    # Unseen keys take the pooled factor: log-space smoothing over all three observations.
    pooled = math.exp(0.5 * (0.5 * math.log(2) + 0.5 * math.log(0.5)) + 0.5 * math.log(4))
    assert table.factor(3, "ring") == pytest.approx(pooled) == table.default
    assert calibrator.observations == 3


def test_keys_wait_for_enough_observations() -> None:
    calibrator = OnlineCalibrator(CalibrationSettings(min_observations=2))
    calibrator.observe(2, "ring", 10.0, 30.0)
    assert (2, "ring") not in calibrator.snapshot().factors
    calibrator.observe(2, "ring", 10.0, 30.0)
    assert calibrator.snapshot().factor(2, "ring") == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.observe(0, "ring", 1.0, 1.0), "degree must be an int >= 1"),
        (lambda c: c.observe(2, "zigzag", 1.0, 1.0), "algo must be one of"),
        (lambda c: c.observe(2, "ring", 0.0, 1.0), "base_ms must be a finite time > 0"),
        (lambda c: c.observe(2, "ring", 1.0, float("nan")), "measured_ms must be a finite time > 0"),
    ],
)
def test_bad_observations_are_refused(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call(OnlineCalibrator())


def test_bad_settings_and_tables_are_refused() -> None:
    with pytest.raises(ValueError, match=r"smoothing must be in \(0, 1\]"):
        CalibrationSettings(smoothing=0.0)
    with pytest.raises(ValueError, match="min_factor <= 1 <= max_factor"):
        CalibrationSettings(min_factor=2.0)
    with pytest.raises(ValueError, match="correction factor of \\(2, ring\\) must be finite and > 0"):
        CorrectionTable({(2, "ring"): -1.0})
    with pytest.raises(ValueError, match="calibration field 'version' must be 1"):
        CorrectionTable.from_json({"version": 7, "factors": []})
    with pytest.raises(ValueError, match=r"field 'factors\[0\]' must hold degree, algo and factor"):
        CorrectionTable.from_json({"version": 1, "factors": [{"degree": 2}]})


def test_json_round_trips_resume_the_same_state() -> None:
    calibrator = OnlineCalibrator(CalibrationSettings(smoothing=0.2))
    for degree, algo, base, measured in [(1, "ring", 5, 6), (2, "ulysses", 8, 6), (2, "ulysses", 8, 7)]:
        calibrator.observe(degree, algo, base, measured)
    resumed = OnlineCalibrator.from_json(json.loads(json.dumps(calibrator.to_json())))
    assert resumed.snapshot() == calibrator.snapshot()
    for c in (calibrator, resumed):
        c.observe(3, "ring", 10, 13)
    assert resumed.snapshot() == calibrator.snapshot()
    table = calibrator.snapshot()
    assert CorrectionTable.from_json(json.loads(json.dumps(table.to_json()))) == table


def test_identity_corrections_change_nothing() -> None:
    base = base_model()
    calibrated = CalibratedCostModel.calibrated(base, CorrectionTable())
    w = base.workload([300, 40, 12, 900])
    for algo in ("ring", "ulysses"):
        np.testing.assert_array_equal(calibrated.group_time_ms(w, DEGREES, algo), base.group_time_ms(w, DEGREES, algo))
    for got, want in zip(calibrated.best_time_ms(w, DEGREES), base.best_time_ms(w, DEGREES)):
        np.testing.assert_array_equal(got, want)


def test_factors_reach_every_time_query_and_can_change_the_best_algo() -> None:
    base = base_model()
    w = base.workload([300, 40, 12, 900])
    ring, uly = base.group_time_ms(w, DEGREES, "ring"), base.group_time_ms(w, DEGREES, "ulysses")
    d = int(np.flatnonzero(np.isfinite(uly) & (uly < ring))[0]) + 1      # a degree where Ulysses wins
    factor = 1.5 * ring[d - 1] / uly[d - 1]                               # ... until it is corrected
    corrections = CorrectionTable({(d, "ulysses"): factor, (1, "ring"): 0.5})
    cost = CalibratedCostModel.calibrated(base, corrections)
    got = cost.group_time_ms(w, DEGREES, "ulysses")
    assert got[d - 1] == pytest.approx(uly[d - 1] * factor)
    assert cost.group_time_ms(w, 1, "ring") == pytest.approx(ring[0] * 0.5)
    times, index = cost.best_time_ms(w, DEGREES)
    assert cost.algos[index[d - 1]] == "ring" and times[d - 1] == pytest.approx(ring[d - 1])
    table_times, table_index = cost.best_time_table([w, w], np.stack([DEGREES, DEGREES]))
    np.testing.assert_allclose(table_times[1], times)
    np.testing.assert_array_equal(table_index[0], index)
    assert cost.uncorrected_time_ms(w, d, "ulysses") == pytest.approx(uly[d - 1])
    # A sibling built the way the solver builds one keeps the factors.
    twin = type(cost)(cost.table, max_tokens_per_rank=1 << 40, algos=cost.algos)
    assert twin.group_time_ms(w, 1, "ring") == pytest.approx(ring[0] * 0.5)


def test_planner_uses_the_corrected_times() -> None:
    base = base_model()
    cost = CalibratedCostModel.calibrated(base, CorrectionTable({(2, "ring"): 3.0}, default=1.2))
    lengths = [300, 40, 120, 33, 8, 700, 64, 15, 220]
    plan = plan_batch(lengths, cost, SolverConfig(num_ranks=4, ranks_per_node=cost.ranks_per_node))
    validate_plan(plan, lengths, cost)
    for round_plan in plan.rounds:
        for g in round_plan.groups:
            w = cost.workload([lengths[i] for i in g.samples])
            assert g.predicted_ms == pytest.approx(float(cost.group_time_ms(w, g.degree, g.algo)))
    assert plan.lower_bound_ms <= plan.predicted_ms


def test_recalibration_corrects_a_deliberately_wrong_coefficient() -> None:
    truth = base_model()
    # The attention (its grids and its call cost) is 3x too slow in the table the planner starts from.
    t = truth.table.time
    wrong = base_model(attention_causal_ms=_scaled(t.attention_causal_ms, 3.0),
                       attention_full_ms=_scaled(t.attention_full_ms, 3.0),
                       attention_call_ms=3.0 * t.attention_call_ms)
    rng = np.random.default_rng(0)
    calibrator = OnlineCalibrator(CalibrationSettings(smoothing=0.3))
    cost: CostModel = wrong
    uncorrected: dict[tuple[int, str], list[float]] = {}
    corrected: dict[tuple[int, str], list[float]] = {}
    for _ in range(40):
        degree = int(rng.integers(1, 5))
        algo = "ulysses" if degree in (2, 4) and rng.random() < 0.5 else "ring"
        w = truth.workload(rng.integers(100, 800, size=int(rng.integers(1, 6))).tolist())
        measured = float(truth.group_time_ms(w, degree, algo))
        uncorrected.setdefault((degree, algo), []).append(float(wrong.group_time_ms(w, degree, algo)) / measured - 1)
        corrected.setdefault((degree, algo), []).append(float(cost.group_time_ms(w, degree, algo)) / measured - 1)
        observe_groups(calibrator, cost, [(w, degree, algo)], [measured])
        cost = CalibratedCostModel.calibrated(wrong, calibrator.snapshot())
    assert len(corrected) == 6   # ring on 1..4 ranks, Ulysses on 2 and 4
    for key in corrected:
        assert min(uncorrected[key]) > 0.5, key            # the table alone is far off everywhere
        assert abs(corrected[key][-1]) < 0.1, (key, corrected[key])


def test_a_round_is_charged_to_its_slowest_group() -> None:
    cost = base_model()
    fast, slow = cost.workload([40]), cost.workload([900, 800])
    calibrator = OnlineCalibrator()
    record = observe_round(calibrator, cost, [(fast, 1, "ring"), (slow, 2, "ring")],
                           2.0 * float(cost.group_time_ms(slow, 2, "ring")))
    assert (record.degree, record.algo) == (2, "ring")
    assert calibrator.snapshot().factors == {(2, "ring"): pytest.approx(2.0)}


def test_measured_times_pull_a_wrong_table_toward_them() -> None:
    lengths = [90, 40, 25]
    right = CostModel.from_preset("cpu-tiny")
    preset = right.table
    # Attention grids 20x too slow: the table is deliberately far from the "device", whose group times are the
    # unscaled preset's (a fixed stand-in for measurements, so the test does not depend on the host's load).
    slow = dataclasses.replace(preset.time, attention_causal_ms=_scaled(preset.time.attention_causal_ms, 20.0),
                               attention_full_ms=_scaled(preset.time.attention_full_ms, 20.0))
    wrong = CostModel(dataclasses.replace(preset, time=slow))
    w = wrong.workload(lengths)
    measured = float(right.group_time_ms(right.workload(lengths), 1, "ring"))
    calibrator = OnlineCalibrator()
    cost: CostModel = wrong
    before = abs(math.log(float(wrong.group_time_ms(w, 1, "ring")) / measured))
    for _ in range(4):
        observe_groups(calibrator, cost, [(w, 1, "ring")], [measured])
        cost = CalibratedCostModel.calibrated(wrong, calibrator.snapshot())
    after = abs(math.log(float(cost.group_time_ms(w, 1, "ring")) / measured))
    assert before > 1.0
    assert after < 0.5 * before


def _scaled(grid, factor: float):  # type: ignore[no-untyped-def]
    return dataclasses.replace(grid, y=tuple(factor * y for y in grid.y))


def test_calibrated_table_validates_like_its_profile() -> None:
    base = base_model()
    cost = CalibratedCostModel.calibrated(base, CorrectionTable({(2, "ring"): 2.0}))
    assert isinstance(cost.table, ProfileTable)
    assert cost.table.to_dict() == base.table.to_dict()
    assert cost.capacity_tokens == base.capacity_tokens and cost.algos == base.algos
