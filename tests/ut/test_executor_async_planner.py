"""Async planner: look-ahead hides planning time, errors reach the step that needed the plan."""
from __future__ import annotations

import threading
import time

import pytest

from mindspeed_mm.core.fcp.executor.async_planner import AsyncPlanner
from mindspeed_mm.core.fcp.solver import Plan

PLAN_SECONDS = 0.05


def _fake_plan(step: int) -> Plan:
    return Plan(rounds=(), predicted_ms=float(step), lower_bound_ms=0.0, solver_ms=0.0, num_ranks=1)


class _SlowPlanner:
    """Plans take PLAN_SECONDS; records the thread and order of the calls."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[tuple[int, str]] = []
        self.fail_at = fail_at

    def __call__(self, step: int) -> Plan:
        self.calls.append((step, threading.current_thread().name))
        time.sleep(PLAN_SECONDS)
        if step == self.fail_at:
            raise ValueError(f"sample 3 of step {step} does not fit")
        return _fake_plan(step)


def test_synchronous_mode_waits_for_the_whole_planning() -> None:
    planner = _SlowPlanner()
    with AsyncPlanner(planner, 3, look_ahead=False) as plans:
        got = [plans.get(step) for step in range(3)]
    assert [p.plan.predicted_ms for p in got] == [0.0, 1.0, 2.0]
    assert all(p.wait_ms >= PLAN_SECONDS * 1e3 * 0.9 for p in got)
    assert all(name == threading.current_thread().name for _, name in planner.calls)


def test_look_ahead_plans_the_next_step_while_the_current_one_trains() -> None:
    planner = _SlowPlanner()
    with AsyncPlanner(planner, 4, look_ahead=True) as plans:
        first = plans.get(0)
        waits = []
        for step in range(1, 4):
            time.sleep(2 * PLAN_SECONDS)  # the "training" of the previous step
            planned = plans.get(step)
            assert planned.plan.predicted_ms == float(step)
            waits.append(planned.wait_ms)
    assert first.plan.predicted_ms == 0.0
    assert max(waits) < PLAN_SECONDS * 1e3 / 2
    assert [step for step, _ in planner.calls] == [0, 1, 2, 3]
    assert all(name.startswith("fcp-planner") for _, name in planner.calls)


def test_planning_error_surfaces_at_its_step() -> None:
    planner = _SlowPlanner(fail_at=2)
    with AsyncPlanner(planner, 4, look_ahead=True) as plans:
        plans.get(0)
        plans.get(1)
        with pytest.raises(ValueError, match="sample 3 of step 2 does not fit"):
            plans.get(2)


def test_step_outside_the_run_is_rejected() -> None:
    with AsyncPlanner(_SlowPlanner(), 2, look_ahead=False) as plans:
        with pytest.raises(ValueError, match="step 2 is outside 0..1"):
            plans.get(2)
