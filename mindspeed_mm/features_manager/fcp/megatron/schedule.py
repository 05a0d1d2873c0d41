"""Megatron's forward-backward driver for FCP: one micro-batch per round of the step's plan."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..runtime import FCPRuntime, FCPRuntimeError, get_fcp_runtime


def fcp_forward_backward(forward_backward: Callable[..., Any], runtime: FCPRuntime | None = None) -> Callable[..., Any]:
    """Runs `forward_backward` (a megatron-core schedule) over the rounds of the next step's plan.

    The step's plan comes from the runtime's plan source; the schedule then runs exactly R micro-batches
    (R = the plan's rounds, the same on every rank) whatever `num_microbatches` Megatron asked for, and
    the round counter advances before each micro-batch's forward step, so the batch function and the
    attention see that round's group.
    """

    @functools.wraps(forward_backward)
    def run(*, forward_step_func: Callable[..., Any], **kwargs: Any) -> Any:
        if kwargs.get("forward_only"):
            raise FCPRuntimeError("evaluation is not supported under fcp_cp_algo yet: set eval_iters to 0")
        state = runtime or get_fcp_runtime()
        rounds = state.begin_step()

        @functools.wraps(forward_step_func)
        def forward_step(*args: Any, **step_kwargs: Any) -> Any:
            state.next_round()
            return forward_step_func(*args, **step_kwargs)

        kwargs["num_microbatches"] = len(rounds)
        try:
            result = forward_backward(forward_step_func=forward_step, **kwargs)
        except BaseException:
            state.abort_step()
            raise
        state.end_step()
        return result

    return run


def get_forward_backward_func_wrapper(get_func: Callable[..., Callable[..., Any]]) -> Callable[..., Callable[..., Any]]:
    """megatron-core's schedule chooser, returning the chosen schedule driven by the FCP plan."""

    @functools.wraps(get_func)
    def wrapper(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        return fcp_forward_backward(get_func(*args, **kwargs))

    return wrapper
