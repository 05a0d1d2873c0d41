"""FCP's state in Megatron's checkpoints: what a resumed run needs to plan exactly as the uninterrupted one.

The plan of step s is made with the correction factors learned up to step s - 2 (`runtime.recalibration`).
A run resumed after step k would otherwise plan steps k+1 and k+2 with the uncalibrated cost model, and so
lay them out, and time them, differently from the run that saved. Next to every checkpoint Megatron writes,
rank 0 writes `fcp_state.json` into the iteration's folder (all ranks hold the same state); the FCP data
loader of a resumed run, built after Megatron loaded the checkpoint, reads the file of the loaded iteration
(`args.iteration`) and continues from it.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch.distributed as dist

from mindspeed_mm.core.fcp.atomic_io import atomic_write_text

from ..runtime import get_fcp_runtime

logger = logging.getLogger(__name__)

STATE_FILE = "fcp_state.json"
STATE_VERSION = 1


def state_path(checkpoints: str, iteration: int) -> str:
    """Where the FCP state of `iteration` lives: Megatron's folder of that iteration (`iter_0000003`)."""
    return os.path.join(checkpoints, f"iter_{iteration:07d}", STATE_FILE)


def fcp_state(iteration: int) -> dict[str, Any]:
    """The state to save after `iteration` steps: the step count and the calibration, if the run calibrates."""
    source = get_fcp_runtime().plan_source
    recalibrator = getattr(getattr(getattr(source, "plans", None), "source", None), "recalibrator", None)
    return {"version": STATE_VERSION, "steps_done": iteration,
            "calibration": None if recalibrator is None else recalibrator.to_json()}


def save_checkpoint_wrapper(save: Callable[..., Any]) -> Callable[..., Any]:
    """Megatron's `save_checkpoint`, then FCP's state next to it (rank 0)."""

    @functools.wraps(save)
    def run(iteration: int, *args: Any, **kwargs: Any) -> Any:
        result = save(iteration, *args, **kwargs)
        from megatron.training import get_args

        checkpoints = get_args().save
        if checkpoints and (not dist.is_initialized() or dist.get_rank() == 0):
            path = state_path(checkpoints, iteration)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write_text(path, json.dumps(fcp_state(iteration), indent=1))
            logger.info("FCP: state after step %d saved to %s", iteration, path)
        return result

    return run


def resumed_state(checkpoints: str | None, iteration: int) -> Mapping[str, Any] | None:
    """The FCP state saved with the checkpoint of `iteration` that this run loaded (None for a fresh run).

    A checkpoint without one (saved by a run without FCP) is resumed with the uncalibrated cost model."""
    if not checkpoints or iteration <= 0:
        return None
    path = state_path(checkpoints, iteration)
    if not os.path.isfile(path):
        logger.warning("FCP: the checkpoint of step %d has no %s; the next two steps are planned with the "
                       "uncalibrated cost model", iteration, STATE_FILE)
        return None
    with open(path, encoding="utf-8") as handle:
        state = read_state(json.load(handle), path)
    logger.info("FCP: resuming from the state of step %d (%s)", iteration, path)
    return state


def read_state(doc: Any, where: str) -> Mapping[str, Any]:
    """A state document, checked; a wrong one raises ValueError naming the file and the field."""
    if not isinstance(doc, Mapping) or doc.get("version") != STATE_VERSION:
        raise ValueError(f"{where}: not an FCP state of version {STATE_VERSION}")
    if not isinstance(doc.get("steps_done"), int) or doc["steps_done"] < 0:
        raise ValueError(f"{where}: steps_done must be a non-negative integer, got {doc.get('steps_done')!r}")
    if doc.get("calibration") is not None and not isinstance(doc["calibration"], Mapping):
        raise ValueError(f"{where}: calibration must be a mapping or null")
    return doc


__all__ = ["STATE_FILE", "fcp_state", "read_state", "resumed_state", "save_checkpoint_wrapper", "state_path"]
