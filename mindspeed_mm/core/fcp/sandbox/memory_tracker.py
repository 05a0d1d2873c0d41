"""Per-rank memory figures for Megatron's memory log line, on accelerators and on the CPU."""
from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass
from typing import Iterable

import torch

_MB = 1024.0 * 1024.0


@dataclass(frozen=True)
class MemoryStats:
    """Memory of this rank in MB, in the four columns of Megatron's report."""

    allocated_mb: float
    """Accelerator: allocated by tensors now. CPU: bytes of the tracked tensors (parameters, gradients,
    optimizer state)."""
    max_allocated_mb: float
    """Accelerator: peak allocated. CPU: peak of the tracked tensors seen by this tracker."""
    reserved_mb: float
    """Accelerator: held by the caching allocator. CPU: resident set size of the process."""
    max_reserved_mb: float
    """Accelerator: peak reserved. CPU: peak resident set size of the process."""


def _tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return _peak_resident_bytes()


def _peak_resident_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in kilobytes on Linux and in bytes on macOS.
    return peak if sys.platform == "darwin" else peak * 1024


class MemoryTracker:
    """Reads the memory of the model and optimizer on `device`."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self._peak_tracked = 0

    def _tracked_bytes(self) -> int:
        params = list(self.model.parameters())
        grads = [p.grad for p in params if p.grad is not None]
        states = [v for s in self.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        return _tensor_bytes(params) + _tensor_bytes(grads) + _tensor_bytes(states)

    def read(self) -> MemoryStats:
        """Current figures (updates the CPU peak)."""
        if self.device.type == "cuda":
            return MemoryStats(
                allocated_mb=torch.cuda.memory_allocated(self.device) / _MB,
                max_allocated_mb=torch.cuda.max_memory_allocated(self.device) / _MB,
                reserved_mb=torch.cuda.memory_reserved(self.device) / _MB,
                max_reserved_mb=torch.cuda.max_memory_reserved(self.device) / _MB,
            )
        tracked = self._tracked_bytes()
        self._peak_tracked = max(self._peak_tracked, tracked)
        resident = _resident_bytes()
        # The kernel's peak is sampled at different moments than /proc/self/statm: keep them ordered.
        return MemoryStats(
            allocated_mb=tracked / _MB,
            max_allocated_mb=self._peak_tracked / _MB,
            reserved_mb=resident / _MB,
            max_reserved_mb=max(resident, _peak_resident_bytes()) / _MB,
        )
