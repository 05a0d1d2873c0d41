"""Memory measurements: activation bytes kept for backward per token, training-state bytes, runtime bytes."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.profiler.probe_batch import cu_seqlens_of, shard_inputs
from mindspeed_mm.core.fcp.profiler.decoder import Decoder, fcp_core


def saved_tensor_bytes(module: torch.nn.Module, forward: Callable[[], torch.Tensor]) -> int:
    """Bytes of the distinct tensors autograd keeps for backward while `forward` computes `module`'s loss
    (parameters are static memory, not activations); runs the backward and clears the gradients."""
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = forward()
    parameters = {p.untyped_storage().data_ptr() for p in module.parameters()}
    loss.backward()
    module.zero_grad(set_to_none=True)
    return sum(size for pointer, size in seen.items() if pointer not in parameters)


def saved_activation_bytes(decoder: Decoder, shape: ModelShape, lengths: list[int], device: torch.device,
                           seed: int) -> int:
    """Bytes of the distinct tensors autograd keeps for backward in one forward over a packed batch."""
    inputs = shard_inputs(lengths, shape.vocab, 0, 1, seed=seed, device=device)
    core = fcp_core(cu_seqlens_of(lengths), None, "ring", shape.attention_mask == "causal")
    return saved_tensor_bytes(decoder, lambda: decoder(inputs, core))


def training_state_bytes(decoder: Decoder, shape: ModelShape, device: torch.device, seed: int) -> int:
    """Bytes of parameters, gradients and Adam state after one real optimizer step (no sharding)."""
    optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-4)
    inputs = shard_inputs([16], shape.vocab, 0, 1, seed=seed, device=device)
    decoder(inputs, fcp_core((0, 16), None, "ring", True)).backward()
    optimizer.step()
    total = 0
    for parameter in decoder.parameters():
        total += parameter.numel() * parameter.element_size()
        if parameter.grad is not None:
            total += parameter.grad.numel() * parameter.grad.element_size()
    for state in optimizer.state.values():
        total += sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
    optimizer.zero_grad(set_to_none=True)
    return total


def runtime_bytes(device: torch.device) -> int:
    """Memory a rank holds before any model tensor: resident set size on CPU, device memory in use otherwise."""
    if device.type == "cpu":
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(total - free)
    free, total = torch.npu.mem_get_info(device)  # type: ignore[attr-defined]
    return int(total - free)


def device_memory_bytes(device: torch.device, ranks_per_node: int) -> int:
    """Memory of one rank: the device's memory, or the host's physical memory shared by a node's ranks."""
    if device.type == "cpu":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // ranks_per_node
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(torch.npu.get_device_properties(device).total_memory)  # type: ignore[attr-defined]
