"""The two process groups a member of a hybrid Ulysses x ring CP group attends over, as one object.

`fcp_attention(..., group=HybridGroup(...), algo="hybrid")`: a group of degree d = u x r whose group rank
k = i * u + j sits in block i (group ranks i * u .. i * u + u - 1, which run Ulysses together) at place j
(the r ranks at place j of every block run the ring together): `from_pool` picks them from a group pool.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.group_pool import CommGroupPool


@dataclass(frozen=True)
class HybridGroup:
    """This rank's Ulysses block and ring of a hybrid CP group."""

    ulysses_group: dist.ProcessGroup | None
    """The ``ulysses_degree`` consecutive group ranks of this rank's block (None when it is this rank alone)."""
    ring_group: dist.ProcessGroup | None
    """The ``ring_degree`` ranks at this rank's place in every block (None when it is this rank alone)."""
    ulysses_degree: int
    """u: ranks of a block, which split the heads."""
    ring_degree: int
    """r: blocks, which pass K/V around a ring."""

    def __post_init__(self) -> None:
        for name, degree, group in (("ulysses", self.ulysses_degree, self.ulysses_group),
                                    ("ring", self.ring_degree, self.ring_group)):
            if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
                raise ValueError(f"{name}_degree must be a positive integer, got {degree!r}")
            if (group is None) != (degree == 1):
                raise ValueError(f"a hybrid group of {name}_degree {degree} needs "
                                 f"{'no' if degree == 1 else 'a'} {name} process group")

    @classmethod
    def from_pool(cls, pool: CommGroupPool, ranks: Sequence[int], ulysses_degree: int, rank: int) -> "HybridGroup":
        """Global rank `rank`'s block and ring in the hybrid group on global `ranks` (group-rank order) split into
        blocks of `ulysses_degree`, from `pool` (which holds them once every process prewarmed the group's
        `solver.hybrid_split.communicator_rank_sets`, the same sets)."""
        u = int(ulysses_degree)
        if u < 1 or len(ranks) % u:
            raise ValueError(f"a hybrid group of {len(ranks)} ranks cannot be split into blocks of {u}")
        block, place = divmod(list(ranks).index(rank), u)
        members, ring = tuple(ranks[block * u:(block + 1) * u]), tuple(ranks[place::u])
        return cls(pool.get(members) if u > 1 else None, pool.get(ring) if len(ring) > 1 else None, u, len(ring))

    @property
    def degree(self) -> int:
        """d = u x r, the ranks of the whole CP group."""
        return self.ulysses_degree * self.ring_degree

    @property
    def ulysses_rank(self) -> int:
        """j: this rank's place in its block."""
        return _rank_in(self.ulysses_group, self.ulysses_degree, "ulysses")

    @property
    def ring_rank(self) -> int:
        """i: this rank's block."""
        return _rank_in(self.ring_group, self.ring_degree, "ring")

    @property
    def rank(self) -> int:
        """k = i * u + j: this rank's index in the CP group (its zigzag shard)."""
        return self.ring_rank * self.ulysses_degree + self.ulysses_rank


def _rank_in(group: dist.ProcessGroup | None, degree: int, name: str) -> int:
    if group is None:
        return 0
    size = dist.get_world_size(group)
    if size != degree:
        raise ValueError(f"the {name} process group holds {size} ranks, but the hybrid group's {name}_degree is {degree}")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"this process (global rank {dist.get_rank()}) is not a member of the {name} group passed in")
    return rank
