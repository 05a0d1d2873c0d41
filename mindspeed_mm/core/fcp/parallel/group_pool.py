"""Pool of the CP process groups that FCP layouts use, created once and reused every round.

Two ways to create a group, both cached:

* :meth:`CommGroupPool.prewarm` — every process calls it with the same candidate groups (at
  start-up, or with a round's whole layout before the round). Each missing candidate is created
  with ``new_group(ranks, use_local_synchronization=False)``, every process taking part in one
  sorted order. This is always deadlock-free.
* :meth:`CommGroupPool.get` on a miss — only the members call it, and it creates the group with
  ``new_group(ranks, use_local_synchronization=True)``. torch (2.13 here) names such a group after
  its ranks *and the number of process groups the calling process already has*, so the members
  only meet if they hold equally many groups; otherwise they wait on different store keys until
  the timeout. That holds when every process has created the same groups so far (for example the
  first round after a prewarm, when all its groups are new); when layouts change from round to
  round, prewarm each round's layout instead.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import torch.distributed as dist

logger = logging.getLogger(__name__)

DEFAULT_MAX_COMMUNICATORS = 256


class CommGroupPoolFullError(RuntimeError):
    """Creating the requested groups would exceed the pool's ``max_communicators``."""


class CommGroupPool:
    """Hands out the process group of a set of global ranks, creating it once and caching it.

    A group's rank ``i`` is its ``i``-th smallest global rank, whatever order the ranks are given
    in. A group of one rank is an ordinary (communication-free) group.

    Bounded by ``max_communicators``. When full, requests that need a new group raise
    :class:`CommGroupPoolFullError`; nothing is evicted, because destroying a group is only safe
    when all of its members agree to. :meth:`prewarm` counts every group it has created (members or
    not, the same number on every process), so all processes refuse together; :meth:`get` counts
    the groups this process holds.
    """

    def __init__(self, max_communicators: int = DEFAULT_MAX_COMMUNICATORS, *, backend: str | None = None) -> None:
        if max_communicators < 1:
            raise ValueError(f"max_communicators must be >= 1, got {max_communicators}")
        self.max_communicators = max_communicators
        self.backend = backend
        self._groups: dict[tuple[int, ...], dist.ProcessGroup] = {}
        self._prewarmed: set[tuple[int, ...]] = set()

    @property
    def num_communicators(self) -> int:
        """Number of process groups this process belongs to and holds through the pool."""
        return len(self._groups)

    def __contains__(self, ranks: Sequence[int]) -> bool:
        return tuple(sorted(ranks)) in self._groups

    def get(self, ranks: Sequence[int]) -> dist.ProcessGroup:
        """The group of ``ranks`` (global ranks, this process among them); its members create it on a miss."""
        key = self._key(ranks)
        group = self._groups.get(key)
        if group is not None:
            return group
        me = dist.get_rank()
        if me not in key:
            raise ValueError(f"global rank {me} asked for group {list(key)} it is not a member of")
        if len(self._groups) >= self.max_communicators:
            raise CommGroupPoolFullError(
                f"cannot create group {list(key)}: this process already holds max_communicators="
                f"{self.max_communicators} groups"
            )
        group = dist.new_group(list(key), backend=self.backend, use_local_synchronization=True)
        self._groups[key] = group
        logger.debug("members created process group %s (%d held)", list(key), len(self._groups))
        return group

    def prewarm(self, candidates: Iterable[Sequence[int]]) -> int:
        """Create the candidates not prewarmed yet; every process must call this with the same candidates.

        Returns how many new groups this process became a member of.
        """
        me = dist.get_rank()
        missing = sorted({self._key(ranks) for ranks in candidates} - self._prewarmed)
        if len(self._prewarmed) + len(missing) > self.max_communicators:
            raise CommGroupPoolFullError(
                f"prewarming {len(missing)} more groups would make {len(self._prewarmed) + len(missing)}, "
                f"above max_communicators={self.max_communicators}"
            )
        joined = 0
        for key in missing:
            group = dist.new_group(list(key), backend=self.backend, use_local_synchronization=False)
            self._prewarmed.add(key)
            # A group its members already created through get() keeps serving; the new copy is unused.
            if me in key and key not in self._groups:
                self._groups[key] = group
                joined += 1
        logger.info("prewarmed %d process groups (%d joined); pool holds %d", len(missing), joined, len(self._groups))
        return joined

    def _key(self, ranks: Sequence[int]) -> tuple[int, ...]:
        key = tuple(sorted(int(rank) for rank in ranks))
        world = dist.get_world_size()
        if not key:
            raise ValueError("a group needs at least one rank, got none")
        if len(set(key)) != len(key):
            raise ValueError(f"group ranks must be distinct, got {list(ranks)}")
        if key[0] < 0 or key[-1] >= world:
            raise ValueError(f"group ranks must lie in [0, {world}), got {list(ranks)}")
        return key
