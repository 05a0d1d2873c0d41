"""Registry of varlen attention kernels; device backends are imported only when asked for.

| name | device | what it calls |
|---|---|---|
| `npu_fusion` | Ascend NPU | `torch_npu.npu_fusion_attention` / `npu_fusion_attention_grad`, TND layout |
| `torch_varlen` | CUDA | torch's built-in varlen flash attention (`torch.nn.attention.varlen`, torch >= 2.10) |
| `flash_attn` | CUDA | the flash-attn package's varlen functions |
| `torch` | any | the PyTorch reference: dense per document, exact, slow |

`auto` picks by device: `npu_fusion` on NPU; on CUDA `torch_varlen`, else `flash_attn` where installed, else
the reference with a warning that names the option; the reference on the CPU.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from functools import lru_cache

import torch

from mindspeed_mm.core.fcp.parallel.kernels.base import AttentionKernel, VarlenSegments
from mindspeed_mm.core.fcp.parallel.kernels.limits import KernelLimits, LimitedKernel, plan_calls
from mindspeed_mm.core.fcp.parallel.kernels.torch_reference import TorchReferenceKernel, accumulation_dtype

logger = logging.getLogger(__name__)

KERNEL_OPTION = "fcp_attention_kernel"
"""The option that chooses the kernel (YAML key; flag `--fcp-attention-kernel`)."""
AUTO = "auto"


def _load(module: str, cls: str) -> Callable[[], AttentionKernel]:
    def factory() -> AttentionKernel:
        return getattr(importlib.import_module(f"{__name__}.{module}"), cls)()

    return factory


KERNELS: dict[str, Callable[[], AttentionKernel]] = {
    "npu_fusion": _load("npu_fusion", "NpuFusionAttentionKernel"),
    "torch_varlen": _load("torch_varlen", "TorchVarlenKernel"),
    "flash_attn": _load("flash_attn_varlen", "FlashAttnVarlenKernel"),
    "torch": TorchReferenceKernel,
}
KERNEL_CHOICES = (AUTO, *KERNELS)
"""The values of the kernel option (`mindspeed_mm_fcp.options.ATTENTION_KERNELS`, in the same order)."""


class KernelUnavailableError(ValueError):
    """A kernel that is unknown, or whose package or device support is missing here; names the option."""


@lru_cache(maxsize=None)
def get_kernel(name: str) -> AttentionKernel:
    """The kernel registered as ``name`` (one instance per name), its calls kept within the kernel's limits."""
    if name not in KERNELS:
        raise KernelUnavailableError(
            f"{KERNEL_OPTION}={name!r} is not an attention kernel; choose one of {', '.join(KERNEL_CHOICES)}")
    try:
        kernel = KERNELS[name]()
    except ImportError as error:
        raise KernelUnavailableError(
            f"{KERNEL_OPTION}={name!r} is not available here ({error}); available: "
            f"{', '.join(available_kernels())}") from error
    return LimitedKernel(kernel, getattr(kernel, "limits", KernelLimits()))


def available_kernels() -> list[str]:
    """The kernel names that can be built here (`auto` included)."""
    names = [AUTO]
    for name, factory in KERNELS.items():
        try:
            factory()
        except ImportError:
            continue
        names.append(name)
    return names


def check_kernel_option(name: str) -> None:
    """Raises KernelUnavailableError, naming the option and what is available, unless `name` can run here."""
    if name != AUTO:
        get_kernel(name)


@lru_cache(maxsize=None)
def _cuda_kernel() -> str:
    # Both flash kernels need Ampere or newer.
    candidates = ("torch_varlen", "flash_attn") if torch.cuda.get_device_capability()[0] >= 8 else ()
    for name in candidates:
        try:
            get_kernel(name)
        except KernelUnavailableError:
            continue
        return name
    logger.warning(
        "FCP attention on CUDA falls back to the PyTorch reference kernel (dense scores per document, far slower "
        "and memory-bound on long documents): no flash kernel here (torch.nn.attention.varlen needs torch >= 2.10, "
        "flash-attn is not installed, or the GPU predates Ampere); set %s: torch to silence this", KERNEL_OPTION)
    return "torch"


def resolve_kernel_name(option: str, device: torch.device) -> str:
    """The kernel `option` names for tensors on `device` (`auto`: by device)."""
    if option != AUTO:
        return option
    if device.type == "npu":
        return "npu_fusion"
    if device.type == "cuda":
        return _cuda_kernel()
    return "torch"


def default_kernel_name(device: torch.device) -> str:
    """The kernel `auto` picks on `device`."""
    return resolve_kernel_name(AUTO, device)


__all__ = [
    "AUTO", "KERNELS", "KERNEL_CHOICES", "KERNEL_OPTION", "AttentionKernel", "KernelLimits",
    "KernelUnavailableError", "LimitedKernel", "VarlenSegments", "plan_calls", "accumulation_dtype", "available_kernels",
    "check_kernel_option", "default_kernel_name", "get_kernel", "resolve_kernel_name",
]
