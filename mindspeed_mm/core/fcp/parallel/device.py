"""The accelerator behind a device or a process group: waiting for its queued work."""
from __future__ import annotations

import torch
import torch.distributed as dist


def synchronize(device: torch.device) -> None:
    """Waits for queued device work so that wall-clock timers measure it (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)  # type: ignore[attr-defined]


def collective_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where the backend of `group` (default: the default group) communicates: the current accelerator
    for nccl / hccl, else the CPU."""
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "hccl":
        return torch.device("npu", torch.npu.current_device())  # type: ignore[attr-defined]
    return torch.device("cpu")
