"""A small stand-in cost model with the shape of the real one, for the solver tests.

It follows the cost-model contract (additive workloads, vectorised degrees, inf where infeasible)
with per-document quadratic attention, ring steps that overlap P2P with block compute, Ulysses
all-to-alls with head divisibility, a slower link across nodes and a fixed launch cost. Its numbers
are illustrative only; the solver must not depend on them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost.hybrid_costs import HybridSplitRule

FAKE_ALGOS = ("ring", "ulysses")


@dataclass(frozen=True)
class FakeWorkload:
    """Additive aggregates of a packed batch."""

    total_tokens: int
    """LLM tokens of all documents."""
    num_docs: int
    """Documents (samples) in the batch."""
    attn_units: float
    """Sum over documents of length^2 / 2 (causal attention pairs)."""
    vision_patches: int
    """Vision-encoder patches of all documents."""

    def __add__(self, other: "FakeWorkload") -> "FakeWorkload":
        return FakeWorkload(
            self.total_tokens + other.total_tokens,
            self.num_docs + other.num_docs,
            self.attn_units + other.attn_units,
            self.vision_patches + other.vision_patches,
        )


@dataclass(frozen=True)
class FakeTable:
    """Coefficients of the fake model (stands in for a profile table)."""

    capacity_tokens: int = 16384
    ranks_per_node: int = 8
    heads: int = 32
    linear_ms_per_token: float = 1e-2
    attn_ms_per_unit: float = 2e-7
    p2p_ms_per_token: float = 2e-3
    a2a_ms_per_token: float = 3e-3
    inter_node_slowdown: float = 6.0
    launch_ms: float = 5.0
    per_rank_ms: float = 0.4
    expert_parallel: int = 1   # a dense model: no expert-parallel blocks couple the groups


class FakeCostModel:
    """Analytic time/memory model honouring the `CostModel` contract."""

    def __init__(self, table: FakeTable = FakeTable(), *, max_tokens_per_rank: int | None = None,
                 algos: Sequence[str] = FAKE_ALGOS) -> None:
        self.table = table
        self.capacity_tokens = table.capacity_tokens if max_tokens_per_rank is None else max_tokens_per_rank
        self.ranks_per_node = table.ranks_per_node
        self.step = None  # no step costs: plans are priced by their rounds only
        self.state_shard_ranks: int | None = None  # the fake's memory limit does not depend on the run's ranks
        self.heads = table.heads
        self.linear_ms_per_token = table.linear_ms_per_token
        self.attn_ms_per_unit = table.attn_ms_per_unit
        self.p2p_ms_per_token = table.p2p_ms_per_token
        self.a2a_ms_per_token = table.a2a_ms_per_token
        self.inter_node_slowdown = table.inter_node_slowdown
        self.launch_ms = table.launch_ms
        self.per_rank_ms = table.per_rank_ms
        self.algos = tuple(algos)
        self.calls = 0

    hybrid_rule = HybridSplitRule(0)
    """The fake prices no hybrid group."""

    def with_hybrid_degrees(self, degrees) -> "FakeCostModel":
        return self

    def without_memory_limit(self) -> "FakeCostModel":
        return FakeCostModel(self.table, max_tokens_per_rank=1 << 60, algos=self.algos)

    def work_bound_model(self) -> "FakeCostModel":
        return self.without_memory_limit()   # the fake is affine on one rank and has no floor

    def workload_columns(self, lengths, patches=None) -> None:
        return None   # fake workloads are not columns: the planner builds them one group at a time

    def best_placed_time_ms(self, workload: FakeWorkload, degree: int, node_part: int) -> tuple[float, str]:
        times = [float(self.group_time_ms(workload, degree, a, node_part=node_part)) for a in self.algos]
        k = int(np.argmin(times))
        return times[k], self.algos[k]

    def best_placed_time_table(self, workloads: Sequence[FakeWorkload], degrees, node_parts):
        chosen = [self.best_placed_time_ms(w, d, p) for w, d, p in zip(workloads, degrees, node_parts)]
        return np.array([t for t, _ in chosen]), [a for _, a in chosen]

    def min_degree(self, tokens: int) -> int:
        return max(1, -(-int(tokens) // self.capacity_tokens))

    def rank_memory_bytes(self, tokens_on_rank: float) -> float:
        return 1e9 + 1e5 * tokens_on_rank

    def workload(self, lengths: Sequence[int], patches: Sequence[int] | None = None) -> FakeWorkload:
        lengths = [int(x) for x in lengths]
        return FakeWorkload(
            total_tokens=sum(lengths),
            num_docs=len(lengths),
            attn_units=float(sum(x * x for x in lengths)) / 2.0,
            vision_patches=0 if patches is None else int(sum(patches)),
        )

    def ulysses_supported(self, degree: int) -> bool:
        return self.heads % degree == 0

    def group_time_ms(self, workload: FakeWorkload, degrees, algo: str, *, node_part: int | None = None):
        d = np.asarray(degrees, dtype=np.float64)
        node = self.ranks_per_node if node_part is None else node_part
        link = np.where(d > node, self.inter_node_slowdown, 1.0)
        tokens_per_rank = workload.total_tokens / d
        base = (
            self.launch_ms
            + self.per_rank_ms * (d - 1)
            + self.linear_ms_per_token * tokens_per_rank
            + 2e-4 * workload.vision_patches / d
        )
        attn = self.attn_ms_per_unit * workload.attn_units / d
        if algo == "ring":
            block = attn / d
            p2p = self.p2p_ms_per_token * tokens_per_rank * link
            t = base + block + (d - 1) * np.maximum(block, p2p)
        elif algo == "ulysses":
            a2a = self.a2a_ms_per_token * tokens_per_rank * (d - 1) / d * link
            t = base + attn + a2a
            t = np.where(self.heads % np.asarray(degrees) == 0, t, np.inf)
        else:
            raise ValueError(f"unknown algo {algo!r}")
        t = np.where(tokens_per_rank > self.capacity_tokens, np.inf, t)
        return float(t) if np.ndim(t) == 0 else t

    def best_time_ms(self, workload: FakeWorkload, degrees):
        self.calls += 1
        stacked = np.stack([np.broadcast_to(self.group_time_ms(workload, degrees, a), np.shape(degrees))
                            for a in self.algos])
        return stacked.min(axis=0), stacked.argmin(axis=0)

    def best_time_table(self, workloads: Sequence[FakeWorkload], degrees: np.ndarray):
        """Row k: best_time_ms(workloads[k], degrees[k]) -- one call for many workloads."""
        self.calls += 1
        stacked = FakeWorkload(*(np.array([getattr(w, name) for w in workloads], dtype=np.float64)[:, None]
                                 for name in ("total_tokens", "num_docs", "attn_units", "vision_patches")))
        times = np.stack([self.group_time_ms(stacked, degrees, a) for a in self.algos])
        return times.min(axis=0), times.argmin(axis=0)
