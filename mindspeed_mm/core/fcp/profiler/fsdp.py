"""The FSDP round as torch's FSDP2 runs it: the whole decoder sharded over the measurement world, one
`fully_shard` unit per layer and one for the rest, parameters resharded after the forward pass (two
all-gathers and one reduce-scatter per unit and round, FSDP2's default).

A round of a sharded decoder takes its pass plus whatever of the units' collectives, copies and hooks
the pass does not hide. The same decoder unsharded gives the pass alone, at every token count of
the linear grid; `fitting.fit_overlapped` turns the pairs into the table's `fsdp_round_ms` and
`fsdp_overlap`.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.profiler.batch import shard_inputs
from mindspeed_mm.core.fcp.profiler.compute import Repeats
from mindspeed_mm.core.fcp.profiler.decoder import Decoder, skip_core
from mindspeed_mm.core.fcp.profiler.timing import Samples


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


def round_samples(decoder: Decoder, shape: ModelShape, tokens: int, repeats: Repeats, seed: int) -> Samples:
    """Forward + backward of `decoder` without attention work over `tokens` tokens (every rank together)."""
    inputs = shard_inputs([tokens], shape.vocab, 0, 1, seed=seed, device=repeats.device)

    def forward_backward() -> None:
        decoder(inputs, skip_core).backward()
        decoder.zero_grad(set_to_none=True)

    return repeats.time(forward_backward)
