"""Static DP x CP layouts: micro-batches of one CP degree and attention algo, on N / degree replicas.

The micro-batches (`StaticPacker`) are the same under both step semantics; what differs is how the
replicas run them:
- lockstep rounds (`lockstep_rounds`, FSDP): every replica runs its r-th micro-batch in round r, so
  the slowest micro-batches share a round;
- independent replicas (`independent_rounds`, DDP): the micro-batches are dealt longest first to
  the least-loaded replica and each replica runs its own back to back; round r holds every
  replica's r-th micro-batch, and a replica with fewer sits the last rounds out (`IDLE` ranks).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns
from mindspeed_mm.core.fcp.solver.baseline_common import (
    BaselineInfeasibleError,
    placed_group,
    rank_block,
    round_of,
)
from mindspeed_mm.core.fcp.solver.balance import least_loaded_assignment
from mindspeed_mm.core.fcp.solver.placement import compact_node_part, placed_node_part
from mindspeed_mm.core.fcp.solver.plan import IDLE, GroupPlan, RoundPlan, SolverConfig


@dataclass(frozen=True)
class StaticPacks:
    """The micro-batches of one batch under one static (degree, algo)."""

    degree: int
    """CP degree of every group."""
    algo: str
    """Attention algo of every group."""
    bin_of: np.ndarray
    """Each sample's micro-batch."""
    pack_ms: tuple[float, ...]
    """Time of each micro-batch on a group placed as compactly as the node allows."""
    workloads: WorkloadColumns
    """The micro-batches' aggregated workloads (`WorkloadColumns.group_sums`), to re-price a group where it lands."""

    @cached_property
    def packs(self) -> tuple[tuple[int, ...], ...]:
        """Sample indices of each micro-batch, ascending (built when a layout's rounds are)."""
        return members_of_bins(self.bin_of, len(self.pack_ms))

    @cached_property
    def longest_first(self) -> list[int]:
        """The micro-batches by time, longest first; equal times in the order of their sample tuples
        (`packs`), which is that of their lowest sample indices (they are disjoint and none is empty)."""
        first = np.full(len(self.pack_ms), self.bin_of.size, dtype=np.int64)
        np.minimum.at(first, self.bin_of, np.arange(self.bin_of.size))
        return np.lexsort((first, -np.asarray(self.pack_ms))).tolist()


def static_degrees(longest: int, cost: CostModel, config: SolverConfig, algo: str) -> list[int]:
    """Every degree a static layout of `algo` may use for a run whose longest sample is `longest`."""
    first = cost.min_degree(int(longest))
    allowed = set(config.degrees) if config.degrees is not None else None
    return [d for d in range(first, config.degree_limit + 1)
            if config.num_ranks % d == 0 and cost.runs_at(algo, d)
            and (allowed is None or d in allowed)]


def balanced_bins(lengths: np.ndarray, alone_ms: Sequence[float], capacity: int,
                  replicas: int) -> tuple[np.ndarray, int]:
    """Samples spread over rounds x replicas micro-batches of at most `capacity` tokens: the fewest
    rounds whose micro-batches hold the batch, samples dealt longest-time first to the least-loaded
    micro-batch with room (ties to the lowest index), so every micro-batch gets at least one sample.
    Returns each sample's micro-batch and the number of micro-batches."""
    order = np.lexsort((np.arange(lengths.size), -lengths, -np.asarray(alone_ms)))
    sizes = lengths.tolist()
    fewest_packs = -(-int(lengths.sum()) // capacity)
    rounds = max(1, -(-fewest_packs // replicas))
    while True:
        bins = rounds * replicas
        if bins > lengths.size:
            raise BaselineInfeasibleError(
                f"{lengths.size} samples cannot give each of the {replicas} data-parallel replicas a "
                f"micro-batch in each of {rounds} rounds"
            )
        chosen = least_loaded_assignment(order.tolist(), alone_ms, sizes, [capacity] * bins)
        if chosen is not None:
            bin_of = np.empty(lengths.size, dtype=np.int64)
            bin_of[order] = chosen
            return bin_of, bins
        rounds += 1


def members_of_bins(bin_of: np.ndarray, bins: int) -> tuple[tuple[int, ...], ...]:
    """Each bin's sample indices, ascending."""
    members = np.argsort(bin_of, kind="stable").tolist()
    ends = np.cumsum(np.bincount(bin_of, minlength=bins)).tolist()
    return tuple(tuple(members[start:end]) for start, end in zip([0, *ends[:-1]], ends))


class StaticPacker:
    """The micro-batches of one batch under any static (degree, algo): the samples' workload columns are
    built once, and a packing is reused by every layout it would come out the same for. It depends only
    on the lengths, the samples' alone times, the capacity and the replicas, so ring and Ulysses on one
    rank, whose times are equal, pack once."""

    def __init__(self, lengths: np.ndarray, patches: Sequence[int] | None, cost: CostModel) -> None:
        self.lengths = lengths
        self.cost = cost
        self.columns = cost.workload_columns(lengths, None if patches is None else np.asarray(patches))
        self._packings: dict[tuple[int, int, bytes], tuple[np.ndarray, int] | BaselineInfeasibleError] = {}

    def whole_batch_ms(self, degrees: Sequence[int], algo: str) -> np.ndarray:
        """The whole batch's time on one group of each of `degrees` running `algo`, memory ignored."""
        whole = self.columns.group_sums(np.arange(self.lengths.size), np.zeros(self.lengths.size, dtype=np.int64), 1)
        table = np.asarray(degrees, dtype=np.int64).reshape(1, -1)
        return self.cost.without_memory_limit().group_time_table(whole, table, algo)[0]

    def alone_ms(self, degree: int, algo: str) -> np.ndarray:
        """Each sample's time alone on a group of `degree` running `algo`."""
        degrees = np.full((self.lengths.size, 1), degree, dtype=np.int64)
        return self.cost.group_time_table(self.columns, degrees, algo)[:, 0]

    def packs(self, degree: int, algo: str, replicas: int, alone_ms: np.ndarray | None = None) -> StaticPacks:
        """The batch's micro-batches of at most degree x capacity tokens (`balanced_bins`), each priced;
        `alone_ms`: `alone_ms(degree, algo)`, when already known. Raises BaselineInfeasibleError when
        the replicas cannot all get a micro-batch in each round."""
        if alone_ms is None:
            alone_ms = self.alone_ms(degree, algo)
        alone_ms = np.ascontiguousarray(alone_ms, dtype=np.float64)
        key = (degree, replicas, alone_ms.tobytes())
        packing = self._packings.get(key)
        if packing is None:
            try:
                packing = balanced_bins(self.lengths, alone_ms.tolist(), degree * self.cost.capacity_tokens, replicas)
            except BaselineInfeasibleError as err:
                packing = err
            self._packings[key] = packing
        if isinstance(packing, BaselineInfeasibleError):
            raise packing
        bin_of, bins = packing
        sums = self.columns.group_sums(np.arange(bin_of.size), bin_of, bins)
        pack_ms = self.cost.group_time_table(sums, np.full((bins, 1), degree, dtype=np.int64), algo)[:, 0]
        return StaticPacks(degree, algo, bin_of, tuple(pack_ms.tolist()), sums)


def _group(packs: StaticPacks, k: int, replica: int, lengths: np.ndarray, patches: Sequence[int] | None,
           cost: CostModel, ranks_per_node: int) -> GroupPlan:
    """Micro-batch k on the replica's block of ranks, re-priced when the block crosses a node boundary."""
    degree, first = packs.degree, replica * packs.degree
    if placed_node_part(first, degree, ranks_per_node) == compact_node_part(degree, ranks_per_node):
        return GroupPlan(rank_block(replica, degree), degree, packs.algo, packs.packs[k], packs.pack_ms[k])
    return placed_group(first, degree, packs.algo, packs.packs[k], lengths, patches, cost, ranks_per_node,
                        packs.workloads.workload(k))


def lockstep_rounds(packs: StaticPacks, replicas: int, lengths: np.ndarray, patches: Sequence[int] | None,
                    cost: CostModel, ranks_per_node: int) -> list[RoundPlan]:
    """Rounds of `replicas` micro-batches each; sorted chunks (slowest together) minimise the sum of the round maxima."""
    order = packs.longest_first
    return [round_of([_group(packs, k, j, lengths, patches, cost, ranks_per_node)
                      for j, k in enumerate(order[i:i + replicas])])
            for i in range(0, len(order), replicas)]


def dealt_to_replicas(packs: StaticPacks, replicas: int) -> list[list[int]]:
    """Each replica's micro-batches: dealt longest first, each to the least-loaded replica (ties to the lowest index)."""
    order = packs.longest_first
    chosen = least_loaded_assignment(order, packs.pack_ms, [0] * len(order), [0] * replicas)
    assert chosen is not None  # nothing takes room
    dealt: list[list[int]] = [[] for _ in range(replicas)]
    for k, j in zip(order, chosen):
        dealt[j].append(k)
    return dealt


@lru_cache(maxsize=256)
def blocks_are_compact(degree: int, replicas: int, ranks_per_node: int) -> bool:
    """Whether every replica's block of `degree` ranks is placed as compactly as the node allows."""
    return all(placed_node_part(j * degree, degree, ranks_per_node) == compact_node_part(degree, ranks_per_node)
               for j in range(replicas))


def busiest_replica_ms(packs: StaticPacks, dealt: list[list[int]], ranks_per_node: int) -> float | None:
    """The longest replica's work as dealt, when every replica's block is placed as compactly as the
    node allows (its groups then cost `pack_ms`); None when some block crosses a node boundary."""
    if not blocks_are_compact(packs.degree, len(dealt), ranks_per_node):
        return None
    pack_ms = packs.pack_ms
    return max(sum(pack_ms[k] for k in mine) for mine in dealt)


def independent_rounds(packs: StaticPacks, replicas: int, lengths: np.ndarray, patches: Sequence[int] | None,
                       cost: CostModel, ranks_per_node: int, dealt: list[list[int]] | None = None) -> list[RoundPlan]:
    """The micro-batches dealt to the replicas (`dealt_to_replicas`, unless given); round r holds each
    replica's r-th micro-batch, and a replica that has run all of its own leaves its ranks `IDLE`."""
    if dealt is None:
        dealt = dealt_to_replicas(packs, replicas)
    rounds = []
    for r in range(max(len(d) for d in dealt)):
        groups = []
        for j, mine in enumerate(dealt):
            if r < len(mine):
                groups.append(_group(packs, mine[r], j, lengths, patches, cost, ranks_per_node))
            else:
                first = j * packs.degree
                groups.extend(GroupPlan((rank,), 1, IDLE, (), 0.0) for rank in range(first, first + packs.degree))
        rounds.append(round_of(groups))
    return rounds
