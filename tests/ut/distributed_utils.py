"""Run a function on several CPU processes joined by torch.distributed (gloo), for the unit tests.

``run_distributed(fn, world_size, *args)`` is the profiler's world spawner (`run_world`) with the
tests' timeout: it calls ``fn(rank, world_size, *args)`` on every rank of a fresh gloo world and
returns the per-rank values (``fn``, ``args`` and the values must be picklable: define ``fn`` at
module level). A failing rank's traceback, a rank that dies without one, or a run that exceeds
``timeout_s`` raises `DistributedRunError` naming the ranks concerned.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mindspeed_mm.core.fcp.profiler.world import WorldError as DistributedRunError
from mindspeed_mm.core.fcp.profiler.world import run_world

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRuntime

__all__ = ["DistributedRunError", "run_distributed"]


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 300.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks; return the values in rank order."""
    return run_world(fn, world_size, *args, timeout_s=timeout_s)


def whole_world_runtime(rank: int, world_size: int) -> "FCPRuntime":
    """An FCP runtime of `fcp train`'s layout: one plane of all `world_size` ranks (call on every rank)."""
    from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRankLayout, FCPRuntime

    runtime = FCPRuntime()
    runtime.set_layout(FCPRankLayout(planes=(tuple(range(world_size)),), rank=rank))
    return runtime
