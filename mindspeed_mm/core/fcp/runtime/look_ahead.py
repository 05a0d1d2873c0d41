"""Plans step t+1 in a background thread while step t trains."""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.solver import Plan


@dataclass(frozen=True)
class PlannedStep:
    """A step's plan and how long the training thread waited for it."""

    step: int
    """Zero-based step index."""
    plan: Plan
    """The global batch's plan."""
    wait_ms: float
    """Time the training thread was blocked getting the plan (all of the planning when synchronous)."""


class AsyncPlanner:
    """Hands out the plans of the run's steps in order; with `look_ahead`, the next step is planned in the
    background once `ready(step)` says its inputs are known.

    `plan_step(step)` must be deterministic: all ranks call it for the same steps. An error raised
    while planning a step reaches the training thread when that step's plan is requested.
    """

    def __init__(self, plan_step: Callable[[int], Plan], steps: RunSteps, *, look_ahead: bool,
                 ready: Callable[[int], bool] = lambda step: True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._plan_step = plan_step
        self.steps = steps
        self._ready = ready
        self._look_ahead = look_ahead
        self._clock = clock  # seconds; the training thread's wait for a plan is read on it
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fcp-planner") if look_ahead else None
        self._pending: dict[int, Future[Plan]] = {}
        self._next = steps.first
        """The step after the last one handed out (planned next with look-ahead)."""
        if self._executor is not None:
            self._submit(steps.first)

    def _submit(self, step: int) -> None:
        assert self._executor is not None
        if step in self.steps and step not in self._pending and self._ready(step):
            self._pending[step] = self._executor.submit(self._plan_step, step)

    def get(self, step: int) -> PlannedStep:
        """The plan of `step`; in look-ahead mode this also starts planning `step + 1` (when it can be)."""
        self.steps.check(step)
        started = self._clock()
        self._next = step + 1
        future = None
        if self._executor is not None:
            self._submit(step)
            future = self._pending.pop(step, None)
            self._submit(step + 1)
        # Not submitted: its inputs were not known; planning it here raises the reason if they still are not.
        plan = self._plan_step(step) if future is None else future.result()
        return PlannedStep(step=step, plan=plan, wait_ms=(self._clock() - started) * 1e3)

    def refresh(self) -> None:
        """Starts planning the next step in the background if its inputs have become known since."""
        if self._executor is not None:
            self._submit(self._next)

    def close(self) -> None:
        """Stops the background thread (pending plans are cancelled)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            self._pending.clear()

    def __enter__(self) -> "AsyncPlanner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
