"""`torch_npu.contrib.transfer_to_npu` on the host.

The real module redirects CUDA-targeted code to the NPU: `torch.cuda.*` becomes `torch.npu.*`, `cuda` device
arguments become `npu`, the NCCL backend becomes HCCL. Here the NPU is the host, so: `torch.cuda.*` ->
`torch.npu.*` (the host device API), device arguments `cuda` / `npu` / bare indices -> `cpu` in tensor factories,
`Tensor.to` / `.cuda()` / `.npu()` and `Module.to` / `.cuda()` / `.npu()`, the `nccl` / `hccl` backends ->
`gloo`, HCCL process-group options -> none, `DeviceMesh("npu" | "cuda")` -> a CPU mesh. One kernel difference of
the host shows through: `torch.histc` of an integer tensor, which CUDA's kernel counts (the result in the input's
dtype; pytorch issue 38979) and the host's refuses ("histogram_cpu" not implemented for 'Long'), is counted here
as CUDA does: MindSpeed-MM's fused MoE counts each expert's tokens so on the NPU (int64 expert indices, the counts
passed on as `npu_grouped_matmul`'s group list). One backend difference too: `all_gather_into_tensor` into the
stacked output torch documents (`[world, *input shape]`), which NCCL and HCCL take and gloo refuses ("invalid tensor
size"), is handed to gloo as the concatenation it is in memory (MindSpeed-MM's expert-parallel dispatch gathers each
rank's expert counts so). Importing it applies the redirections once.
"""
from __future__ import annotations

import functools
import logging

import torch
import torch.distributed as dist

import torch_npu
from torch_npu._C._distributed_c10d import ProcessGroupHCCL

LOG = logging.getLogger(__name__)
_ACCELERATOR_TYPES = ("cuda", "npu")
_FACTORIES = (
    "empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange", "range", "linspace",
    "logspace", "eye", "tensor", "as_tensor", "empty_strided", "empty_like", "zeros_like", "ones_like",
    "full_like", "rand_like", "randn_like", "randint_like", "scalar_tensor", "tril_indices", "triu_indices",
    "normal", "frombuffer", "asarray",
)
_TENSOR_NEW = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided")
_CUDA_NAMES = (
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device", "device",
    "synchronize", "get_device_name", "get_device_capability", "get_device_properties", "is_bf16_supported",
    "Event", "Stream", "current_stream", "default_stream", "stream", "set_stream", "manual_seed",
    "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "get_rng_state_all", "set_rng_state_all", "default_generators", "memory_allocated", "memory_reserved",
    "memory_cached", "max_memory_allocated", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "memory_stats", "mem_get_info", "empty_cache",
)
_applied = False


def host_device(device):
    """The host counterpart of a device argument: accelerators and bare indices become `cpu`."""
    if device is None:
        return None
    if isinstance(device, bool):
        return device
    if isinstance(device, int):
        return torch.device("cpu")
    if isinstance(device, str):
        kind = device.split(":")[0]
        return torch.device("cpu") if kind in _ACCELERATOR_TYPES else device
    if isinstance(device, torch.device) and device.type in _ACCELERATOR_TYPES:
        return torch.device("cpu")
    return device


def host_backend(backend):
    """`nccl` / `hccl` (also inside `device:backend` lists) -> `gloo`."""
    if backend is None:
        return None
    text = str(backend).lower()
    if any(name in text for name in ("nccl", "hccl")):
        return "gloo"
    return backend


def _with_host_device(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = host_device(kwargs["device"])
        return fn(*args, **kwargs)

    wrapper.__cpu_ascend_wrapped__ = fn
    return wrapper


def _is_device_like(value) -> bool:
    return isinstance(value, (str, torch.device)) or (isinstance(value, int) and not isinstance(value, bool))


def _tensor_to(original):
    @functools.wraps(original)
    def to(self, *args, **kwargs):
        if args and _is_device_like(args[0]):
            args = (host_device(args[0]),) + args[1:]
        if "device" in kwargs:
            kwargs["device"] = host_device(kwargs["device"])
        return original(self, *args, **kwargs)

    return to


def _to_host_method(self, device=None, non_blocking=False, **kwargs):
    """`.cuda()` / `.npu()` of a host tensor: the tensor itself (it already lives on the "device")."""
    return self


def _module_to_host(self, device=None):
    return self


def _patch_factories() -> None:
    for name in _FACTORIES:
        if hasattr(torch, name):
            setattr(torch, name, _with_host_device(getattr(torch, name)))
    for name in _TENSOR_NEW:
        setattr(torch.Tensor, name, _with_host_device(getattr(torch.Tensor, name)))
    torch.Tensor.to = _tensor_to(torch.Tensor.to)
    torch.Tensor.cuda = torch.Tensor.npu = _to_host_method
    module_to = torch.nn.Module.to

    @functools.wraps(module_to)
    def module_to_host(self, *args, **kwargs):
        if args and _is_device_like(args[0]):
            args = (host_device(args[0]),) + args[1:]
        if "device" in kwargs:
            kwargs["device"] = host_device(kwargs["device"])
        return module_to(self, *args, **kwargs)

    torch.nn.Module.to = module_to_host
    torch.nn.Module.cuda = torch.nn.Module.npu = _module_to_host


def _patch_cuda_namespace() -> None:
    for name in _CUDA_NAMES:
        setattr(torch.cuda, name, getattr(torch_npu.npu, name))
    torch.cuda.memory_allocated = torch_npu.npu.memory_allocated


def _patch_distributed() -> None:
    init_process_group = dist.init_process_group

    @functools.wraps(init_process_group)
    def init_host_process_group(*args, **kwargs):
        if args:
            args = (host_backend(args[0]),) + args[1:]
        kwargs["backend"] = host_backend(kwargs.get("backend")) if "backend" in kwargs or not args else None
        if kwargs["backend"] is None:
            kwargs.pop("backend")
        if "device_id" in kwargs:
            kwargs["device_id"] = None
        return init_process_group(*args, **kwargs)

    new_group = dist.new_group

    @functools.wraps(new_group)
    def new_host_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = host_backend(kwargs["backend"])
        if isinstance(kwargs.get("pg_options"), ProcessGroupHCCL.Options):
            kwargs["pg_options"] = None
        if len(args) >= 3:
            args = args[:2] + (host_backend(args[2]),) + args[3:]
        return new_group(*args, **kwargs)

    dist.init_process_group = dist.distributed_c10d.init_process_group = init_host_process_group
    dist.new_group = dist.distributed_c10d.new_group = new_host_group

    gather_into_tensor = dist.all_gather_into_tensor

    @functools.wraps(gather_into_tensor)
    def gather_into_stacked_or_flat(output_tensor, input_tensor, group=None, async_op=False):
        if input_tensor.dim() and output_tensor.dim() == input_tensor.dim() + 1 and output_tensor.is_contiguous():
            output_tensor = output_tensor.view(-1, *input_tensor.shape[1:])  # [world, *shape] -> [world * n, ...]
        return gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)

    dist.all_gather_into_tensor = dist.distributed_c10d.all_gather_into_tensor = gather_into_stacked_or_flat

    from torch.distributed import device_mesh

    mesh_init = device_mesh.DeviceMesh.__init__

    @functools.wraps(mesh_init)
    def host_mesh_init(self, device_type, *args, **kwargs):
        mesh_init(self, "cpu" if device_type in _ACCELERATOR_TYPES else device_type, *args, **kwargs)

    device_mesh.DeviceMesh.__init__ = host_mesh_init
    init_device_mesh = device_mesh.init_device_mesh

    @functools.wraps(init_device_mesh)
    def init_host_device_mesh(device_type, *args, **kwargs):
        return init_device_mesh("cpu" if device_type in _ACCELERATOR_TYPES else device_type, *args, **kwargs)

    device_mesh.init_device_mesh = dist.init_device_mesh = init_host_device_mesh


def _patch_histc() -> None:
    histc = torch.histc

    @functools.wraps(histc)
    def accelerator_histc(input, bins=100, min=0, max=0, *, out=None):
        if input.is_floating_point() or out is not None:
            return histc(input, bins=bins, min=min, max=max, out=out)
        counts = histc(input.to(torch.float64), bins=bins, min=min, max=max)
        return counts.to(input.dtype)

    torch.histc = accelerator_histc


def apply() -> None:
    """Apply the redirections (idempotent)."""
    global _applied
    if _applied:
        return
    _applied = True
    _patch_cuda_namespace()
    _patch_factories()
    _patch_distributed()
    _patch_histc()
    LOG.info("cpu_ascend transfer_to_npu: cuda/npu -> host (cpu), nccl/hccl -> gloo")


apply()
