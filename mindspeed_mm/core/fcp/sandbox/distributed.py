"""Process-group and megatron-core start-up for `fcp train` (torchrun or a single plain process)."""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.sandbox.run_config import DEFAULT_COMM_TIMEOUT_S


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits in the run."""

    rank: int
    """Global rank (= FCP rank: TP = PP = 1)."""
    world_size: int
    """Number of processes (= FCP ranks)."""
    device: torch.device
    """Device the model runs on."""
    backend: str
    """torch.distributed backend: gloo on CPU, nccl on CUDA, hccl on Ascend NPU."""
    comm_timeout_s: float = DEFAULT_COMM_TIMEOUT_S
    """Longest wait of an exchange on the world group; FCP's groups are created with the same timeout."""


def _accelerator(local_rank: int) -> tuple[torch.device, str]:
    if importlib.util.find_spec("torch_npu") is not None:
        import torch_npu  # noqa: F401  (registers the npu device)

        if torch.npu.is_available():  # type: ignore[attr-defined]
            torch.npu.set_device(local_rank)  # type: ignore[attr-defined]
            return torch.device("npu", local_rank), "hccl"
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


JOIN_TIMEOUT_S = 600.0
"""Longest wait for every process of the world to join."""


def init_distributed(force_cpu: bool = False, comm_timeout_s: float = DEFAULT_COMM_TIMEOUT_S) -> DistributedContext:
    """Joins the torchrun world (or makes a one-process world) and sets megatron-core's TP = PP = 1 state.

    Every exchange on the world group waits at most `comm_timeout_s` seconds; joining the world waits
    up to `JOIN_TIMEOUT_S` instead, since processes start at different times (their imports alone can
    take minutes on a loaded host). An already initialised default group keeps the timeout it was
    created with.
    """
    from megatron.core import parallel_state

    if not 0 < comm_timeout_s < float("inf"):
        raise ValueError(f"comm_timeout_s must be a positive number of seconds, got {comm_timeout_s}")
    timeout = timedelta(seconds=comm_timeout_s)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device, backend = (torch.device("cpu"), "gloo") if force_cpu else _accelerator(local_rank)
    if not dist.is_initialized():
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            # Under torchrun the agent already serves the store on MASTER_PORT; every worker is a client.
            serves = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                                  is_master=serves, timeout=timedelta(seconds=max(JOIN_TIMEOUT_S, comm_timeout_s)),
                                  wait_for_workers=True)
            store.set_timeout(timeout)  # from here on, a wait on the store is an exchange like any other
            dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    return DistributedContext(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device, backend=backend,
                              comm_timeout_s=comm_timeout_s)


def shutdown_distributed() -> None:
    """Releases megatron-core's groups and the default process group."""
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
