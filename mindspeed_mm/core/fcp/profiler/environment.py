"""Facts about the host a profile was taken on: device name, software versions, cores, load."""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mindspeed_mm.core.fcp import __version__


def device_name(device: str) -> str:
    """Human-readable name of the device kind on this host."""
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    if device == "npu":
        return str(torch.npu.get_device_name(0))  # type: ignore[attr-defined]
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load_average() -> tuple[float, float, float] | None:
    """1, 5 and 15 minute load averages of the host (None where the OS does not report them)."""
    try:
        return tuple(float(x) for x in os.getloadavg())  # type: ignore[return-value]
    except OSError:
        return None


def versions() -> dict[str, str]:
    """Versions of the software the measurements depend on."""
    return {"fcp": __version__, "torch": torch.__version__, "python": platform.python_version(),
            "numpy": np.__version__}


def host_facts(device: str) -> dict[str, Any]:
    """Device name, versions, logical cores and the current load."""
    return {"device_name": device_name(device), "versions": versions(), "host_cores": os.cpu_count(),
            "platform": platform.platform(), "load_average": load_average()}
