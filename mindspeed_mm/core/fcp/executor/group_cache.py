"""Process groups of the plans' CP groups, created collectively in plan order and reused every round.

Groups are created with `torch.distributed.new_group(ranks)` called by every rank, in the same
order on all ranks: the order of the (rank-identical, digest-checked) plan. torch names groups
created with `use_local_synchronization=True` after their ranks *and the number of groups the
calling process already holds*, so member-only creation deadlocks as soon as two members of a new
group have created different numbers of groups before (e.g. a rank that was alone in an earlier
round); collective creation in one global order keeps the names consistent. A creation costs a
world-wide store barrier, paid once per distinct group.
"""
from __future__ import annotations

import logging
from typing import Iterable, Sequence

import torch.distributed as dist

from mindspeed_mm.core.fcp.solver import Plan

logger = logging.getLogger(__name__)


class PlanGroupCache:
    """The process group of every multi-rank group of the plans seen so far."""

    def __init__(self) -> None:
        self._groups: dict[tuple[int, ...], dist.ProcessGroup] = {}
        self._created: set[tuple[int, ...]] = set()

    @property
    def num_communicators(self) -> int:
        """Process groups this rank is a member of through the cache."""
        return len(self._groups)

    def create(self, candidates: Iterable[Sequence[int]]) -> int:
        """Creates, on every rank, each candidate group (of 2+ ranks) not created yet; returns how many.

        Every rank must call this with the same candidates in the same order.
        """
        created = 0
        for ranks in candidates:
            key = tuple(int(r) for r in ranks)
            if len(key) < 2 or key in self._created:
                continue
            group = dist.new_group(list(key))
            self._created.add(key)
            if dist.get_rank() in key:
                self._groups[key] = group
            created += 1
        if created:
            logger.debug("created %d process groups; this rank holds %d", created, self.num_communicators)
        return created

    def prepare(self, plan: Plan) -> int:
        """Creates the groups `plan` uses that do not exist yet (collective: call on every rank)."""
        return self.create(group.ranks for round_plan in plan.rounds for group in round_plan.groups)

    def get(self, ranks: Sequence[int]) -> dist.ProcessGroup:
        """The group of exactly `ranks`, which must have been created and include this rank."""
        key = tuple(int(r) for r in ranks)
        group = self._groups.get(key)
        if group is None:
            if key in self._created:
                raise ValueError(f"rank {dist.get_rank()} is not a member of group {list(key)}")
            raise ValueError(f"group {list(key)} was not created; call prepare(plan) on every rank first")
        return group
