"""Communication measurements: ring point-to-point exchanges and all-to-alls over message and group sizes.

For a group size g the world is cut into disjoint contiguous groups of g ranks that all
communicate at once (ranks left over wait at the barrier), as the groups of one round do.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.parallel.comm import RingComm
from mindspeed_mm.core.fcp.profiler.compute import Repeats
from mindspeed_mm.core.fcp.profiler.timing import Samples, idle_repeats

COMM_KINDS = ("p2p", "all_to_all")


def layout_of(group_size: int, world_size: int) -> list[tuple[int, ...]]:
    """Disjoint contiguous groups of ``group_size`` ranks covering as much of the world as fits."""
    return [tuple(range(first, first + group_size)) for first in range(0, world_size - group_size + 1, group_size)]


def prewarm_groups(pool: CommGroupPool, group_sizes: Sequence[int], world_size: int) -> None:
    """Create every group the measurements use, with all processes taking part."""
    pool.prewarm([ranks for size in group_sizes for ranks in layout_of(size, world_size)])


def comm_samples(kind: str, nbytes: int, group_size: int, pool: CommGroupPool, repeats: Repeats) -> Samples | None:
    """This rank's times of one exchange of ``nbytes`` (None if the rank is left out at this group size).

    ``p2p``: every rank sends ``nbytes`` to the next rank of its group while receiving as much from
    the previous one (one ring step). ``all_to_all``: every rank sends ``nbytes`` split evenly
    over the group (its own share included). All ranks of the world call this together.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = next((ranks for ranks in layout_of(group_size, world) if rank in ranks), None)
    if mine is None:
        idle_repeats(repeats=repeats.repeats, device=repeats.device, min_sample_ms=repeats.min_sample_ms)
        return None
    group = pool.get(mine)
    elements = max(1, nbytes // 4)
    if kind == "p2p":
        comm = RingComm(group)
        send = torch.ones(elements, dtype=torch.float32, device=repeats.device)
        recv = torch.empty_like(send)

        def exchange() -> None:
            comm.exchange(send, recv).wait()

        return repeats.time(exchange)
    if kind != "all_to_all":
        raise ValueError(f"communication kind must be one of {list(COMM_KINDS)}, got {kind!r}")
    elements = max(group_size, elements - elements % group_size)
    send = torch.ones(elements, dtype=torch.float32, device=repeats.device)
    recv = torch.empty_like(send)

    def all_to_all() -> None:
        dist.all_to_all_single(recv, send, group=group)

    return repeats.time(all_to_all)
