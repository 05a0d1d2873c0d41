"""Timing with warm-up, repeats and a robust summary, started together on every rank.

Two clocks: `wall` (elapsed time, what a device with its own compute units shows) and `cpu` (the
CPU time of the whole process, all its threads). On a host whose ranks share few cores with other
jobs, elapsed time mostly measures the scheduler: a rank waits for a core for as long as it runs.
Process CPU time counts only the work the rank did itself (compute, and the CPU side of its
communication), i.e. the elapsed time it would take with a core of its own, minus the time it
blocks waiting for its peers.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.device import synchronize

STATISTICS = ("median", "lower_quartile", "min")
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""Clock name -> function returning seconds."""


def check_clock(clock: str, device: str) -> None:
    """Raise ValueError for an unknown clock, or the CPU clock on an accelerator (its work is not CPU time)."""
    if clock not in CLOCKS:
        raise ValueError(f"--clock must be one of {list(CLOCKS)}, got {clock!r}")
    if clock == "cpu" and device != "cpu":
        raise ValueError(f"--clock cpu measures host CPU time and cannot time work on device {device!r}; use wall")


@dataclass(frozen=True)
class Samples:
    """Repeated times of one measurement, milliseconds per run on the clock it was read with."""

    times_ms: tuple[float, ...]
    """Every timed repeat, in run order."""

    def summary(self, statistic: str) -> float:
        """The chosen statistic of the repeats (one of STATISTICS)."""
        return summarize(self.times_ms, statistic)


def summarize(values: Sequence[float], statistic: str) -> float:
    """``median``, ``lower_quartile`` (25th percentile, interpolated) or ``min`` of ``values``."""
    if not values:
        raise ValueError("cannot summarise an empty list of times")
    if statistic == "median":
        return float(statistics.median(values))
    if statistic == "lower_quartile":
        ordered = sorted(values)
        position = 0.25 * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))
    if statistic == "min":
        return float(min(values))
    raise ValueError(f"statistic must be one of {list(STATISTICS)}, got {statistic!r}")


def time_repeats(fn: Callable[[], object], *, warmup: int, repeats: int, device: torch.device,
                 min_sample_ms: float = 0.0, clock: str = "wall", group: dist.ProcessGroup | None = None,
                 barrier: bool = True, clocks: Mapping[str, Callable[[], float]] = CLOCKS) -> Samples:
    """Run ``fn`` ``warmup`` times untimed, then take ``repeats`` timed samples of it.

    A sample runs ``fn`` back to back enough times to last about ``min_sample_ms`` (elapsed) and
    reports the mean per run on ``clock``: on a host whose ranks share cores, a single short run right after a barrier
    catches the ranks before the scheduler has spread them and reads too fast; longer samples see
    the steady sharing that a training round sees. With ``barrier`` (and torch.distributed
    initialised), every rank of ``group`` starts each sample together and runs as many calls per
    sample as the slowest rank needs (so collective operations stay matched). ``clock`` names
    one of ``clocks`` (CLOCKS; tests pass their own), whose ``wall`` entry also sizes the samples.
    """
    now, elapsed = clocks[clock], clocks["wall"]
    synced = barrier and dist.is_initialized()
    for _ in range(warmup):
        fn()
    synchronize(device)
    calls = 1
    if min_sample_ms > 0:
        # Sized on elapsed time: a sample should keep every rank busy for min_sample_ms.
        started = elapsed()
        fn()
        synchronize(device)
        single_ms = max((elapsed() - started) * 1e3, 1e-3)
        calls = max(1, math.ceil(min_sample_ms / single_ms))
        if synced:
            calls = _agree_on_calls(calls, device, group)
    times = []
    for _ in range(repeats):
        if synced:
            dist.barrier(group=group)
        started = now()
        for _ in range(calls):
            fn()
        synchronize(device)
        times.append((now() - started) * 1e3 / calls)
    return Samples(tuple(times))


def _agree_on_calls(calls: int, device: torch.device, group: dist.ProcessGroup | None) -> int:
    agreed = torch.tensor([calls], dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    return int(agreed.item())


def idle_repeats(*, repeats: int, device: torch.device, min_sample_ms: float = 0.0,
                 group: dist.ProcessGroup | None = None) -> None:
    """Take part in the barriers (and call-count agreement) of a `time_repeats` this rank sits out."""
    if min_sample_ms > 0:
        _agree_on_calls(1, device, group)
    for _ in range(repeats):
        dist.barrier(group=group)
