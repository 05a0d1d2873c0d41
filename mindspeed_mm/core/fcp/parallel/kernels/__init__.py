"""Registry of varlen attention kernels; device backends are imported only when asked for."""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from functools import lru_cache

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import AttentionKernel, VarlenSegments
from mindspeed_mm.core.fcp.parallel.kernels.torch_reference import TorchReferenceKernel, accumulation_dtype


def _load(module: str, cls: str) -> Callable[[], AttentionKernel]:
    def factory() -> AttentionKernel:
        return getattr(importlib.import_module(f"{__name__}.{module}"), cls)()

    return factory


KERNELS: dict[str, Callable[[], AttentionKernel]] = {
    "torch": TorchReferenceKernel,
    "flash_attn": _load("flash_attn_varlen", "FlashAttnVarlenKernel"),
    "npu_fusion": _load("npu_fusion", "NpuFusionAttentionKernel"),
}


@lru_cache(maxsize=None)
def get_kernel(name: str) -> AttentionKernel:
    """The kernel registered as ``name`` (one instance per name)."""
    if name not in KERNELS:
        raise ValueError(f"unknown attention kernel {name!r}; choose one of {sorted(KERNELS)}")
    try:
        return KERNELS[name]()
    except ImportError as error:
        raise ValueError(f"attention kernel {name!r} is not available here: {error}") from error


def default_kernel_name(device: torch.device) -> str:
    """``npu_fusion`` on NPU, ``flash_attn`` on CUDA when installed, else the PyTorch reference."""
    if device.type == "npu":
        return "npu_fusion"
    if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attn"
    return "torch"


__all__ = ["KERNELS", "AttentionKernel", "VarlenSegments", "accumulation_dtype", "default_kernel_name", "get_kernel"]
