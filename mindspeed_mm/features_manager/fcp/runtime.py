"""The process-wide FCP runtime that the patched Megatron and MindSpeed-MM functions share.

Megatron calls the patched functions without passing FCP anything, so they meet here: the
model-parallel initialisation records where this process sits among the FCP ranks, the
forward-backward driver starts each step with its plan, and the batch function and the attention
read the round being run. Nothing in Megatron's own global state is changed. The runtime itself
(rounds, groups, timing) is `mindspeed_mm.core.fcp.runtime.step_runtime`, the one `fcp train` drives too.
"""
from __future__ import annotations

from mindspeed_mm.core.fcp.runtime.step_runtime import (
    FCPRankLayout,
    FCPRound,
    FCPRuntime,
    FCPRuntimeError,
    FCPRuntimeSettings,
    MeasuringPlanSource,
    PlanSource,
    rounds_of_rank,
)

_RUNTIME = FCPRuntime()


def get_fcp_runtime() -> FCPRuntime:
    """The FCP state of this process."""
    return _RUNTIME


def reset_fcp_runtime(settings: FCPRuntimeSettings | None = None) -> FCPRuntime:
    """Replaces the FCP state with a fresh one (at registration, and between tests)."""
    global _RUNTIME
    _RUNTIME = FCPRuntime(settings)
    return _RUNTIME


__all__ = [
    "FCPRankLayout", "FCPRound", "FCPRuntime", "FCPRuntimeError", "FCPRuntimeSettings", "MeasuringPlanSource",
    "PlanSource", "get_fcp_runtime", "reset_fcp_runtime", "rounds_of_rank",
]
