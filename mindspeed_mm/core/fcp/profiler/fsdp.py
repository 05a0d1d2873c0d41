"""The FSDP round as torch's FSDP2 runs it: the whole decoder sharded over the measurement world, one
`fully_shard` unit per layer and one for the rest, parameters resharded after the forward pass (two
all-gathers and one reduce-scatter per unit and round, FSDP2's default).

A round of a sharded decoder takes its pass plus whatever of the units' collectives, copies and hooks
the pass does not hide. The same decoder unsharded gives the pass alone, at every token count of
the linear grid (`compute.linear_samples` times both); `fitting.fit_overlapped` turns the pairs into
the table's `fsdp_round_ms` and `fsdp_overlap`.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.profiler.decoder import Decoder


def sharded_decoder(shape: ModelShape, dtype: str, seed: int, device: torch.device) -> Decoder:
    """The whole decoder under FSDP2 over every rank of the world (same weights on every rank before sharding)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    decoder = Decoder(shape, dtype, seed).to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in decoder.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    fully_shard(decoder, mesh=mesh, reshard_after_forward=True)
    return decoder
