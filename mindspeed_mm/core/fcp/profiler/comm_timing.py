"""Communication measurements: ring point-to-point exchanges and all-to-alls over message and group sizes.

For a group size g the world is cut into disjoint contiguous groups of g ranks that all
communicate at once (ranks left over sit the measurement out), as the groups of one round do.

Each exchange is timed twice: alone, back to back, and inside a busy step the way the attention
algorithms use it, next to a reference compute block (ring: the exchange is started, the block
computes, then the exchange is waited for; Ulysses: the block, then the all-to-all). The busy
time minus the block alone tells how much of the transfer the block hides; on a host whose ranks
share cores, the transfer waits for its peer to be scheduled and costs more than alone.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.parallel.collectives import RingComm
from mindspeed_mm.core.fcp.parallel.kernels import VarlenSegments, default_kernel_name, get_kernel
from mindspeed_mm.core.fcp.profiler.compute import Repeats
from mindspeed_mm.core.fcp.profiler.decoder import TORCH_DTYPES
from mindspeed_mm.core.fcp.profiler.timing import idle_repeats

COMM_KINDS = ("p2p", "all_to_all")


@dataclass(frozen=True)
class CommSamples:
    """Times of one exchange size on one rank, milliseconds per run."""

    alone: tuple[float, ...]
    """The exchange alone, back to back."""
    busy: tuple[float, ...]
    """The exchange together with the reference block (see the module docstring)."""
    block: tuple[float, ...]
    """The reference block alone."""

    def __add__(self, other: "CommSamples") -> "CommSamples":
        return CommSamples(self.alone + other.alone, self.busy + other.busy, self.block + other.block)


def layout_of(group_size: int, world_size: int) -> list[tuple[int, ...]]:
    """Disjoint contiguous groups of ``group_size`` ranks covering as much of the world as fits."""
    return [tuple(range(first, first + group_size)) for first in range(0, world_size - group_size + 1, group_size)]


def prewarm_groups(pool: CommGroupPool, group_sizes: Sequence[int], world_size: int) -> None:
    """Create every group the measurements use, with all processes taking part."""
    pool.prewarm([ranks for size in group_sizes for ranks in layout_of(size, world_size)])


def reference_block(shape: ModelShape, dtype: str, length: int, docs: int, device: torch.device,
                    seed: int) -> Callable[[], object]:
    """Forward of the off-diagonal attention block of ``docs`` documents whose shard holds ``length`` tokens."""
    generator = torch.Generator().manual_seed(seed)
    kv_len = max(1, math.ceil(length / 2))
    torch_dtype = TORCH_DTYPES[dtype]
    q = torch.randn(docs * length, shape.heads, shape.head_dim, generator=generator, dtype=torch_dtype).to(device)
    k = torch.randn(docs * kv_len, shape.kv_heads, shape.head_dim, generator=generator, dtype=torch_dtype).to(device)
    v = torch.randn(k.shape, generator=generator, dtype=torch_dtype).to(device)
    segments = VarlenSegments(tuple(range(0, docs * length + 1, length)), tuple(range(0, docs * kv_len + 1, kv_len)))
    kernel = get_kernel(default_kernel_name(device))
    scale = 1.0 / math.sqrt(shape.head_dim)
    return lambda: kernel.forward(q, k, v, segments, causal=False, softmax_scale=scale)


def comm_samples(kind: str, nbytes: int, group_size: int, pool: CommGroupPool, block: Callable[[], object],
                 repeats: Repeats) -> CommSamples | None:
    """This rank's times of one exchange of ``nbytes`` (None if the rank sits this group size out).

    ``p2p``: every rank sends ``nbytes`` to the next rank of its group while receiving as much from
    the previous one (one ring step). ``all_to_all``: every rank sends ``nbytes`` split evenly over
    the group (its own share included). All ranks of the world call this together.
    """
    if kind not in COMM_KINDS:
        raise ValueError(f"communication kind must be one of {list(COMM_KINDS)}, got {kind!r}")
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = next((ranks for ranks in layout_of(group_size, world) if rank in ranks), None)
    if mine is None:
        for _ in range(3):
            idle_repeats(repeats=repeats.repeats, device=repeats.device, min_sample_ms=repeats.min_sample_ms)
        return None
    group = pool.get(mine)
    elements = max(group_size, nbytes // 4)
    if kind == "all_to_all":
        elements -= elements % group_size
    send = torch.ones(elements, dtype=torch.float32, device=repeats.device)
    recv = torch.empty_like(send)
    if kind == "p2p":
        ring = RingComm(group)

        def alone() -> None:
            ring.exchange(send, recv).wait()

        def busy() -> None:
            pending = ring.exchange(send, recv)
            block()
            pending.wait()
    else:
        def alone() -> None:
            dist.all_to_all_single(recv, send, group=group)

        def busy() -> None:
            block()
            dist.all_to_all_single(recv, send, group=group)

    return CommSamples(alone=repeats.time(alone).times_ms, busy=repeats.time(busy).times_ms,
                       block=repeats.time(block).times_ms)
