"""Plans step t+1 in a background thread while step t trains."""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

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
    """Hands out plans step by step; with `look_ahead`, the next step is planned in the background.

    `plan_step(step)` must be deterministic: all ranks call it for the same steps. An error raised
    while planning a step reaches the training thread when that step's plan is requested.
    """

    def __init__(self, plan_step: Callable[[int], Plan], num_steps: int, *, look_ahead: bool,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if num_steps <= 0:
            raise ValueError(f"num_steps must be positive, got {num_steps}")
        self._plan_step = plan_step
        self._num_steps = num_steps
        self._look_ahead = look_ahead
        self._clock = clock  # seconds; the training thread's wait for a plan is read on it
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fcp-planner") if look_ahead else None
        self._pending: dict[int, Future[Plan]] = {}
        if self._executor is not None:
            self._submit(0)

    def _submit(self, step: int) -> None:
        assert self._executor is not None
        if step < self._num_steps and step not in self._pending:
            self._pending[step] = self._executor.submit(self._plan_step, step)

    def get(self, step: int) -> PlannedStep:
        """The plan of `step`; in look-ahead mode this also starts planning `step + 1`."""
        if not 0 <= step < self._num_steps:
            raise ValueError(f"step {step} is outside 0..{self._num_steps - 1}")
        started = self._clock()
        if self._executor is None:
            plan = self._plan_step(step)
        else:
            self._submit(step)
            future = self._pending.pop(step)
            self._submit(step + 1)
            plan = future.result()
        return PlannedStep(step=step, plan=plan, wait_ms=(self._clock() - started) * 1e3)

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
