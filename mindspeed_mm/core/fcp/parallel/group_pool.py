"""Pool of the CP process groups that FCP layouts use, created once and reused every round."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import torch.distributed as dist

logger = logging.getLogger(__name__)

DEFAULT_MAX_COMMUNICATORS = 256


class CommGroupPoolFullError(RuntimeError):
    """The pool already holds its maximum number of communicators and a new group was requested."""


class CommGroupPool:
    """Hands out the process group of a set of global ranks, creating it on first use and caching it.

    Groups are created with ``new_group(ranks, use_local_synchronization=True)``, so only their
    members take part. A group's rank ``i`` is its ``i``-th smallest global rank, whatever order
    the ranks are given in. A group of one rank is an ordinary (communication-free) group.

    The pool is bounded by ``max_communicators`` groups held by this process. When it is full, a
    request for a new group raises :class:`CommGroupPoolFullError` instead of evicting: a group can
    only be destroyed safely when all its members agree, and torch names groups created this way
    after their ranks, so a destroyed group could not be re-created under the same name. Size the
    bound for the candidate layouts (see :meth:`prewarm`).
    """

    def __init__(self, max_communicators: int = DEFAULT_MAX_COMMUNICATORS, *, backend: str | None = None) -> None:
        if max_communicators < 1:
            raise ValueError(f"max_communicators must be >= 1, got {max_communicators}")
        self.max_communicators = max_communicators
        self.backend = backend
        self._groups: dict[tuple[int, ...], dist.ProcessGroup] = {}

    @property
    def num_communicators(self) -> int:
        """Number of process groups this process holds through the pool."""
        return len(self._groups)

    def __contains__(self, ranks: Sequence[int]) -> bool:
        return tuple(sorted(ranks)) in self._groups

    def get(self, ranks: Sequence[int]) -> dist.ProcessGroup:
        """The group of ``ranks`` (global ranks, this process among them); created by the members on first use."""
        key = self._key(ranks)
        group = self._groups.get(key)
        if group is not None:
            return group
        me = dist.get_rank()
        if me not in key:
            raise ValueError(f"global rank {me} asked for group {list(key)} it is not a member of")
        return self._create(key)

    def prewarm(self, candidates: Iterable[Sequence[int]]) -> int:
        """Create, at start-up, every candidate group this process belongs to; return how many were new.

        Every process must pass the same candidates. They are created in one sorted order on all
        processes, so no two processes ever wait on each other's groups in opposite orders.
        """
        me = dist.get_rank()
        created = 0
        for key in sorted({self._key(ranks) for ranks in candidates}):
            if me in key and key not in self._groups:
                self._create(key)
                created += 1
        logger.info("prewarmed %d process groups; pool holds %d", created, self.num_communicators)
        return created

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

    def _create(self, key: tuple[int, ...]) -> dist.ProcessGroup:
        if len(self._groups) >= self.max_communicators:
            raise CommGroupPoolFullError(
                f"cannot create group {list(key)}: the pool already holds max_communicators="
                f"{self.max_communicators} groups"
            )
        group = dist.new_group(list(key), backend=self.backend, use_local_synchronization=True)
        self._groups[key] = group
        logger.debug("created process group %s (%d held)", list(key), len(self._groups))
        return group
