"""How a hybrid group splits its degree (Ulysses x ring), and the rank sets a planned group communicates over.

A hybrid group of degree d = u x r runs Ulysses over blocks of u consecutive ranks (ranks i*u .. i*u+u-1) and
ring attention over the r ranks at the same place j of every block (ranks j, u+j, 2u+j, ...).
`communicator_rank_sets` is the one answer to "which communicators does this group need": ring and Ulysses
groups need their ranks; a hybrid group needs its ranks too (the exchanges of the group as a whole, such as
the vision encoder split over its members), its u-blocks and its rings.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mindspeed_mm.core.fcp.solver.errors import InvalidPlanError
from mindspeed_mm.core.fcp.solver.placement import placed_node_part

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel
    from mindspeed_mm.core.fcp.solver.plan import Plan

HYBRID = "hybrid"
"""Algo of a group running Ulysses inside blocks of consecutive ranks and a ring across the blocks."""


@dataclass(frozen=True)
class HybridSplit:
    """u x r of a hybrid group."""

    ulysses_degree: int
    """u: consecutive ranks of a block, which split the heads with an all-to-all (inside one node)."""
    ring_degree: int
    """r: blocks, which pass K/V around a ring of the ranks at the same place in each block."""

    def __post_init__(self) -> None:
        for name in ("ulysses_degree", "ring_degree"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidPlanError(f"hybrid split: {name} must be a positive int, got {value!r}")

    @property
    def degree(self) -> int:
        """u x r."""
        return self.ulysses_degree * self.ring_degree

    def to_json(self) -> dict[str, int]:
        """The split as a JSON-ready dict."""
        return {"ulysses_degree": self.ulysses_degree, "ring_degree": self.ring_degree}

    @classmethod
    def from_json(cls, data: Any) -> "HybridSplit":
        """Reads a split written by `to_json`."""
        if not isinstance(data, dict) or set(data) != {"ulysses_degree", "ring_degree"}:
            raise InvalidPlanError(f"hybrid split JSON must be {{'ulysses_degree': u, 'ring_degree': r}}, got {data!r}")
        return cls(int(data["ulysses_degree"]), int(data["ring_degree"]))


def hybrid_rank_sets(ranks: Sequence[int], ulysses_degree: int) -> tuple[tuple[tuple[int, ...], ...],
                                                                         tuple[tuple[int, ...], ...]]:
    """(blocks, rings) of a hybrid group on `ranks` (in group-rank order): block i holds ranks[i*u : (i+1)*u],
    ring j holds ranks[j::u]."""
    u = int(ulysses_degree)
    if u < 1 or len(ranks) % u:
        raise ValueError(f"a hybrid group of {len(ranks)} ranks cannot be split into blocks of {u}")
    members = tuple(ranks)
    blocks = tuple(members[i:i + u] for i in range(0, len(members), u))
    rings = tuple(members[j::u] for j in range(u))
    return blocks, rings


def communicator_rank_sets(ranks: Sequence[int], split: HybridSplit | None) -> tuple[tuple[int, ...], ...]:
    """The sets of ranks that need a communicator for a group on `ranks` (`split`: its hybrid split, None for
    ring and Ulysses): the group's ranks, and for a hybrid group its u-blocks and its rings; sets of one rank
    (no communicator) and repeats left out, in a fixed order."""
    sets = [tuple(ranks)]
    if split is not None:
        blocks, rings = hybrid_rank_sets(ranks, split.ulysses_degree)
        sets.extend(blocks)
        sets.extend(rings)
    seen: set[tuple[int, ...]] = set()
    out = []
    for rank_set in sets:
        if len(rank_set) > 1 and rank_set not in seen:
            seen.add(rank_set)
            out.append(rank_set)
    return tuple(out)


def with_hybrid_splits(plan: "Plan", lengths: Sequence[int], cost: "CostModel") -> "Plan":
    """`plan` with the split of every hybrid group that carries none: the fastest where the group is placed,
    which is the split its predicted time was priced at (`CostModel.hybrid_splits`)."""
    todo = [(r, k) for r, round_plan in enumerate(plan.rounds) for k, group in enumerate(round_plan.groups)
            if group.algo == HYBRID and group.hybrid is None]
    if not todo:
        return plan
    node = int(plan.extras.get("ranks_per_node", cost.ranks_per_node))
    groups = [plan.rounds[r].groups[k] for r, k in todo]
    splits = cost.hybrid_splits([cost.workload([int(lengths[s]) for s in g.samples]) for g in groups],
                                [g.degree for g in groups],
                                [placed_node_part(g.ranks[0], g.degree, node) for g in groups])
    rounds = [list(round_plan.groups) for round_plan in plan.rounds]
    for (r, k), group, u in zip(todo, groups, splits.tolist()):
        if u == 0:
            raise InvalidPlanError(f"round {r}, group on ranks {list(group.ranks)}: no Ulysses x ring split of "
                                   f"degree {group.degree} runs where it is placed")
        rounds[r][k] = dataclasses.replace(group, hybrid=HybridSplit(u, group.degree // u))
    return dataclasses.replace(plan, rounds=tuple(dataclasses.replace(round_plan, groups=tuple(groups))
                                                  for round_plan, groups in zip(plan.rounds, rounds)))
