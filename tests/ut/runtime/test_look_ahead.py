"""Async planner: look-ahead hides planning time, errors reach the step that needed the plan.

The planner's clock is a fake that advances only while a plan is computed, and the background
thread's progress is followed through events, so nothing here depends on how busy the host is.
"""
from __future__ import annotations

import threading

import pytest

from mindspeed_mm.core.fcp.runtime.look_ahead import AsyncPlanner
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.solver import Plan

PLAN_SECONDS = 0.05
"""What one plan costs on the fake clock."""
EVENT_TIMEOUT_S = 60.0
"""Bound on waiting for the background thread (a hang fails the test instead of blocking it)."""


def _fake_plan(step: int) -> Plan:
    return Plan(rounds=(), predicted_ms=float(step), lower_bound_ms=0.0, solver_ms=0.0, num_ranks=1)


class _GatedPlanner:
    """Plans cost PLAN_SECONDS on `clock`; with `gated`, a step's planning waits for `release(step)`.

    Records the thread and order of the calls, and signals when each step's planning starts and ends.
    """

    def __init__(self, num_steps: int, *, gated: bool = False, fail_at: int | None = None) -> None:
        self.now = 0.0
        self.calls: list[tuple[int, str]] = []
        self.fail_at = fail_at
        self.gated = gated
        self.started = [threading.Event() for _ in range(num_steps)]
        self.done = [threading.Event() for _ in range(num_steps)]
        self._gates = [threading.Event() for _ in range(num_steps)]

    def clock(self) -> float:
        return self.now

    def release(self, step: int) -> None:
        self._gates[step].set()

    def __call__(self, step: int) -> Plan:
        self.calls.append((step, threading.current_thread().name))
        self.started[step].set()
        if self.gated:
            assert self._gates[step].wait(EVENT_TIMEOUT_S), f"step {step} was never released"
        self.now += PLAN_SECONDS
        self.done[step].set()
        if step == self.fail_at:
            raise ValueError(f"sample 3 of step {step} does not fit")
        return _fake_plan(step)


def _wait(event: threading.Event) -> None:
    assert event.wait(EVENT_TIMEOUT_S), "the background planner did not get there"


def test_synchronous_mode_waits_for_the_whole_planning() -> None:
    planner = _GatedPlanner(3)
    with AsyncPlanner(planner, RunSteps(0, 3), look_ahead=False, clock=planner.clock) as plans:
        got = [plans.get(step) for step in range(3)]
    assert [p.plan.predicted_ms for p in got] == [0.0, 1.0, 2.0]
    assert [p.wait_ms for p in got] == pytest.approx([PLAN_SECONDS * 1e3] * 3)
    assert all(name == threading.current_thread().name for _, name in planner.calls)


def test_look_ahead_plans_the_next_step_while_the_current_one_trains() -> None:
    planner = _GatedPlanner(4, gated=True)
    with AsyncPlanner(planner, RunSteps(0, 4), look_ahead=True, clock=planner.clock) as plans:
        planner.release(0)
        assert plans.get(0).plan.predicted_ms == 0.0
        for step in range(1, 4):
            # The previous step "trains": its successor is planned meanwhile, in the background.
            _wait(planner.started[step])
            if step + 1 < 4:  # one planning thread: the step after waits until this one is handed out
                assert not planner.started[step + 1].is_set()
            planner.release(step)
            _wait(planner.done[step])
            planned = plans.get(step)
            assert planned.plan.predicted_ms == float(step)
            assert planned.wait_ms == 0.0  # planned ahead: no planning time left to wait for
    assert [step for step, _ in planner.calls] == [0, 1, 2, 3]
    assert all(name.startswith("fcp-planner") for _, name in planner.calls)


def test_planning_error_surfaces_at_its_step() -> None:
    planner = _GatedPlanner(4, fail_at=2)
    with AsyncPlanner(planner, RunSteps(0, 4), look_ahead=True, clock=planner.clock) as plans:
        plans.get(0)
        plans.get(1)
        with pytest.raises(ValueError, match="sample 3 of step 2 does not fit"):
            plans.get(2)


def test_step_outside_the_run_is_rejected() -> None:
    with AsyncPlanner(_GatedPlanner(2), RunSteps(0, 2), look_ahead=False) as plans:
        with pytest.raises(ValueError, match="step 2 is outside the run's steps 0..1"):
            plans.get(2)
