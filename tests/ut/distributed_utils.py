"""Run a function on several CPU processes joined by torch.distributed (gloo), for the unit tests.

``run_distributed(fn, world_size, *args)`` spawns ``world_size`` processes with
``torch.multiprocessing`` (spawn start method), initialises a gloo default group through a
``file://`` store in a fresh temporary directory, calls ``fn(rank, world_size, *args)`` on every
rank and returns the per-rank return values (which must be picklable, as must ``fn`` and ``args``:
define ``fn`` at module level). A failing rank's traceback, a rank that dies without one, or a run
that exceeds ``timeout_s`` raises :class:`DistributedRunError` naming the ranks concerned; the
remaining processes are terminated.
"""
from __future__ import annotations

import os
import pickle
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

_POLL_S = 0.05


class DistributedRunError(RuntimeError):
    """A rank of a spawned world failed, died or did not finish in time."""


def _worker(
    rank: int, fn: Callable[..., Any], world_size: int, workdir: str, timeout_s: float, args: tuple[Any, ...]
) -> None:
    result_path = Path(workdir) / f"rank{rank}.pkl"
    # Several ranks share few cores: one intra-op thread each avoids oversubscription.
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{Path(workdir) / 'store'}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        payload = ("ok", value)
    except BaseException:  # reported to the parent with its traceback
        payload = ("error", traceback.format_exc())
    tmp_path = result_path.with_suffix(".tmp")
    with open(tmp_path, "wb") as handle:
        pickle.dump(payload, handle)
    os.replace(tmp_path, result_path)


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 120.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks; return the values in rank order."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    with tempfile.TemporaryDirectory(prefix="fcp_dist_") as workdir:
        context = mp.start_processes(
            _worker, args=(fn, world_size, workdir, timeout_s, args), nprocs=world_size, join=False,
            start_method="spawn",
        )
        try:
            return _collect(context, world_size, Path(workdir), timeout_s)
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
            for process in context.processes:
                process.join(timeout=5)


def _collect(context: mp.ProcessContext, world_size: int, workdir: Path, timeout_s: float) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    results: dict[int, Any] = {}
    while len(results) < world_size:
        for rank in range(world_size):
            if rank in results:
                continue
            path = workdir / f"rank{rank}.pkl"
            if path.exists():
                with open(path, "rb") as handle:
                    status, value = pickle.load(handle)
                if status == "error":
                    raise DistributedRunError(f"rank {rank} of {world_size} failed:\n{value}")
                results[rank] = value
            elif not context.processes[rank].is_alive():
                # The result file may land just before the process exits: look once more.
                if not path.exists():
                    code = context.processes[rank].exitcode
                    raise DistributedRunError(f"rank {rank} of {world_size} exited with code {code} without a result")
        if len(results) < world_size and time.monotonic() > deadline:
            missing = sorted(set(range(world_size)) - set(results))
            raise DistributedRunError(f"ranks {missing} of {world_size} did not finish within {timeout_s:.0f} s")
        time.sleep(_POLL_S)
    return [results[rank] for rank in range(world_size)]
