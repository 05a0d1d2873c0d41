"""Measurements of a step's own costs on the profiled decoder: the optimizer step and the whole-model
collectives of a gradient reduction over the measurement world.

- `optimizer`: torch's Adam over every parameter of the decoder (gradients set), as a replica runs it;
- `all_reduce`: one flat all-reduce of the fp32 gradients over the world (DDP, `fcp train`);
- `all_gather` / `reduce_scatter`: the parameters in the training dtype gathered, and the fp32
  gradients reduce-scattered, over the world in one flat collective each: the bytes an FSDP round
  moves, kept beside FSDP2's real rounds (`profiler.fsdp`) for comparison.
All ranks run each collective together; a world of one rank moves no bytes and records none.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.profiler.compute import Repeats
from mindspeed_mm.core.fcp.profiler.decoder import TORCH_DTYPES, Decoder

STEP_KINDS = ("optimizer", "all_reduce", "all_gather", "reduce_scatter")
"""Keys of `step_samples`' result (the collectives only on worlds of more than one rank)."""


def _adam_step(decoder: Decoder, seed: int) -> Callable[[], object]:
    generator = torch.Generator().manual_seed(seed)
    for parameter in decoder.parameters():
        parameter.grad = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype).to(parameter.device)
    optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-6)
    return optimizer.step


def _collectives(parameters: int, dtype: str, device: torch.device) -> dict[str, Callable[[], object]]:
    world = dist.get_world_size()
    per_rank = -(-parameters // world)
    grads = torch.ones(per_rank * world, dtype=torch.float32, device=device)
    grad_shard = torch.empty(per_rank, dtype=torch.float32, device=device)
    params = torch.ones(per_rank * world, dtype=TORCH_DTYPES[dtype], device=device)
    param_shard = torch.ones(per_rank, dtype=TORCH_DTYPES[dtype], device=device)
    # torch 2.13 renamed the flat collectives; the accelerators' torch builds may predate the new names.
    all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
    return {
        "all_reduce": lambda: dist.all_reduce(grads),
        "all_gather": lambda: all_gather(params, param_shard),
        "reduce_scatter": lambda: reduce_scatter(grad_shard, grads),
    }


def step_samples(decoder: Decoder, dtype: str, repeats: Repeats, seed: int) -> dict[str, tuple[float, ...]]:
    """This rank's times (ms per run) of every kind of `STEP_KINDS` on `decoder`'s parameters."""
    out = {"optimizer": repeats.time(_adam_step(decoder, seed)).times_ms}
    if dist.get_world_size() > 1:
        parameters = sum(p.numel() for p in decoder.parameters())
        for kind, run in _collectives(parameters, dtype, repeats.device).items():
            out[kind] = repeats.time(run).times_ms
    return out
