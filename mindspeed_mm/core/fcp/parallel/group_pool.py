"""Pool of the CP process groups that FCP layouts use, created once and reused every round.

Groups are created collectively: every process calls :meth:`CommGroupPool.prewarm` with the same
candidates (at start-up with every group of the run's catalogue, or before a step with the
groups of that step's plan), and each missing candidate is created with
``new_group(ranks, use_local_synchronization=False)`` in one sorted order on all processes. A group
is then made ready by a first collective of its members (HCCL and NCCL set a communicator up, and
allocate its buffers, at its first collective, not when the group object is created): each process
runs one on every new group it belongs to, in that same order, so that every group's first
collective finds all its members (the earliest group not yet done has all its members past the
groups before it).

Creation by the members alone (``use_local_synchronization=True``) is deliberately not offered:
torch (2.13 here) names such a group after its ranks *and the number of process groups the calling
process already holds*, so two members that took part in different groups before wait on
different store keys and never meet. FCP plans are identical on every rank (their digest is checked
each step), so collective creation in plan order costs nothing extra in coordination: one store
barrier per distinct group, paid once.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.parallel.device import collective_device

logger = logging.getLogger(__name__)

DEFAULT_MAX_COMMUNICATORS = 256


class CommGroupPoolFullError(RuntimeError):
    """Creating the requested groups would exceed the pool's ``max_communicators``."""


class CommGroupPool:
    """Hands out the process group of a set of global ranks; groups are created once, collectively.

    A group's rank ``i`` is its ``i``-th smallest global rank, whatever order the ranks are given
    in. A group of one rank is an ordinary (communication-free) group.

    Bounded by ``max_communicators`` groups created (members or not, the same count on every
    process, so all processes refuse together). When full, :meth:`prewarm` raises
    :class:`CommGroupPoolFullError`; nothing is evicted, because destroying a group is only safe
    when all of its members agree to.

    ``timeout_s`` bounds every exchange on the pool's groups (and their creation): a member that
    stalls makes the others fail within it instead of waiting for torch's default of 30 minutes.
    None keeps torch's default.
    """

    def __init__(self, max_communicators: int = DEFAULT_MAX_COMMUNICATORS, *, backend: str | None = None,
                 timeout_s: float | None = None) -> None:
        if max_communicators < 1:
            raise ValueError(f"max_communicators must be >= 1, got {max_communicators}")
        if timeout_s is not None and not (0 < timeout_s and math.isfinite(timeout_s)):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s}")
        self.max_communicators = max_communicators
        self.backend = backend
        self.timeout_s = timeout_s
        self._groups: dict[tuple[int, ...], dist.ProcessGroup] = {}
        self._created: set[tuple[int, ...]] = set()

    @property
    def num_communicators(self) -> int:
        """Number of process groups this process belongs to and holds through the pool."""
        return len(self._groups)

    @property
    def num_created(self) -> int:
        """Number of groups created through the pool, on every process alike (the bounded count)."""
        return len(self._created)

    def __contains__(self, ranks: Sequence[int]) -> bool:
        return tuple(sorted(ranks)) in self._groups

    def get(self, ranks: Sequence[int]) -> dist.ProcessGroup:
        """The group of ``ranks`` (global ranks, this process among them), created by :meth:`prewarm`."""
        key = self._key(ranks)
        group = self._groups.get(key)
        if group is not None:
            return group
        me = dist.get_rank()
        if me not in key:
            raise ValueError(f"global rank {me} asked for group {list(key)} it is not a member of")
        raise ValueError(f"group {list(key)} has not been created: every process must call "
                         f"prewarm() with it (e.g. with the step's plan) before it is used")

    def prewarm(self, candidates: Iterable[Sequence[int]]) -> int:
        """Create the candidates not created yet and make them ready (a first collective of each); every process
        must call this with the same candidates.

        Returns how many new groups this process became a member of.
        """
        candidates = list(candidates)
        if not candidates:  # e.g. a plan of single-rank groups, which needs no communicator
            return 0
        me = dist.get_rank()
        missing = sorted({self._key(ranks) for ranks in candidates} - self._created)
        if len(self._created) + len(missing) > self.max_communicators:
            raise CommGroupPoolFullError(
                f"creating {len(missing)} more groups would make {len(self._created) + len(missing)}, "
                f"above max_communicators={self.max_communicators}"
            )
        joined = []
        for key in missing:
            group = dist.new_group(list(key), backend=self.backend, use_local_synchronization=False,
                                   timeout=None if self.timeout_s is None else timedelta(seconds=self.timeout_s))
            self._created.add(key)
            if me in key:
                self._groups[key] = group
                joined.append(key)
        for key in joined:  # in the creation order, on every process
            self._make_ready(self._groups[key])
        if missing:
            logger.debug("created %d process groups (%d joined, made ready); pool holds %d", len(missing),
                         len(joined), len(self._groups))
        return len(joined)

    @staticmethod
    def _make_ready(group: dist.ProcessGroup) -> None:
        """A first collective on `group`, which sets its communicator up (a one-element all-reduce)."""
        if dist.get_world_size(group) < 2:
            return
        dist.all_reduce(torch.zeros(1, device=collective_device(group)), group=group)

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
