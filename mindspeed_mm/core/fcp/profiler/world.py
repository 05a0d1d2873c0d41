"""Spawn a small torch.distributed world on this host and collect one result per rank.

Multi-process measurements (communication, group executions) run ``fn(rank, world_size, *args)``
in ``world_size`` spawned processes joined by a TCP store on this host. Every process uses one intra-op
thread, so ranks do not fight over cores more than the world size forces them to.
"""
from __future__ import annotations

import os
import pickle
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
_HOST = "127.0.0.1"
BACKENDS = ("gloo", "nccl", "hccl")


class WorldError(RuntimeError):
    """A rank of a spawned measurement world failed, died or ran out of time."""


def check_backend(backend: str, device: str) -> None:
    """Raise ValueError when ``backend`` cannot run on this host for ``device``."""
    if backend not in BACKENDS:
        raise ValueError(f"--backend must be one of {list(BACKENDS)}, got {backend!r}")
    if not dist.is_available():
        raise ValueError("torch.distributed is not available in this torch build")
    if backend == "gloo" and not dist.is_gloo_available():
        raise ValueError("--backend gloo: this torch build has no gloo support")
    if backend == "nccl" and (device != "cuda" or not dist.is_nccl_available()):
        raise ValueError(f"--backend nccl needs --device cuda and an NCCL-enabled torch (device {device!r})")
    if backend == "hccl" and device != "npu":
        raise ValueError(f"--backend hccl needs --device npu (device {device!r})")


def raise_priority(nice: int) -> None:
    """Run this process at scheduling priority `nice` (negative: ahead of other work; needs privileges).

    Where the kernel groups processes by session ("autogroup"), a process's nice value only orders
    it inside its session; the process then starts a session of its own and sets that group's
    priority, so the boost covers this process alone.
    """
    autogroup = Path("/proc/self/autogroup")
    try:
        if autogroup.exists():
            os.setsid()
            autogroup.write_text(f"{nice}\n")
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as exc:
        raise PermissionError(f"--nice {nice}: cannot change the scheduling priority here: {exc}") from exc


def _worker(rank: int, fn: Callable[..., Any], world_size: int, backend: str, port: int, timeout_s: float,
            nice: int | None, args: tuple[Any, ...], results: Any) -> None:
    torch.set_num_threads(1)
    try:
        if nice is not None:
            raise_priority(nice)
        timeout = timedelta(seconds=timeout_s)
        store = dist.TCPStore(_HOST, port, world_size, is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        try:
            payload: tuple[str, Any] = ("ok", fn(rank, world_size, *args))
        finally:
            dist.destroy_process_group()
        message = pickle.dumps(payload)
    except BaseException:  # sent to the parent with its traceback
        message = pickle.dumps(("error", traceback.format_exc()))
    results.put((rank, message))


def run_world(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo",
              timeout_s: float = 300.0, nice: int | None = None) -> list[Any]:
    """``fn(rank, world_size, *args)`` on every rank of a fresh world; the return values in rank order.

    ``fn`` and ``args`` must be picklable (``fn`` defined at module level). A failing, dying or
    late rank raises WorldError naming it; the other processes are then terminated. ``nice``
    runs the ranks at that scheduling priority (see `raise_priority`). The ranks meet at a TCP store
    this process serves on a free local port and send their results back through a pipe, so a run
    leaves nothing on disk, even when it is killed.
    """
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    store = dist.TCPStore(_HOST, 0, world_size + 1, is_master=True, timeout=timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    results = mp.get_context("spawn").SimpleQueue()
    context = mp.start_processes(_worker, args=(fn, world_size, backend, store.port, timeout_s, nice, args, results),
                                 nprocs=world_size, join=False, start_method="spawn")
    try:
        return _collect(context, world_size, results, timeout_s)
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
        for process in context.processes:
            process.join(timeout=5)
        del store


def _collect(context: mp.ProcessContext, world_size: int, results: Any, timeout_s: float) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    values: dict[int, Any] = {}
    while len(values) < world_size:
        while not results.empty():
            rank, message = results.get()
            status, value = pickle.loads(message)
            if status == "error":
                raise WorldError(f"rank {rank} of {world_size} failed:\n{value}")
            values[rank] = value
        for rank in range(world_size):
            process = context.processes[rank]
            if rank not in values and not process.is_alive() and results.empty():
                raise WorldError(f"rank {rank} of {world_size} exited with code {process.exitcode} without a result")
        if len(values) < world_size and time.monotonic() > deadline:
            missing = sorted(set(range(world_size)) - set(values))
            raise WorldError(f"ranks {missing} of {world_size} did not finish within {timeout_s:.0f} s")
        if len(values) < world_size:
            time.sleep(_POLL_S)
    return [values[rank] for rank in range(world_size)]
