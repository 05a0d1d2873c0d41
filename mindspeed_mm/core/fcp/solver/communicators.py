"""The communicators FCP's CP groups need, and the fixed catalogue of groups a run may use within a budget per rank.

Every CP group of more than one rank is a communicator, which holds its own buffers on each member for the rest of
the run (HCCL reserves 2 x HCCL_BUFFSIZE per communicator; a group is only destroyed when all its members agree,
so the pool never does). A rank pays for every distinct group it ever joins. A run's `GroupCatalogue`, fixed at
start from the plane's size, the largest degree and the budget, is every group its plans may use, and no rank is
a member of more than `budget` of their communicators, the plane's own group (which rounds spreading their media
over all ranks exchange on) included:

- when every contiguous range of 2..max_degree ranks fits the budget (planes of up to 4 ranks at the default
  budget), the catalogue is all of them and placement is free (`contiguous`);
- otherwise groups lie on the aligned slot grid (`placement.slot_grid_placement`: a group of d ranks starts at a
  multiple of the next power of two, so a rank is in at most one group of each degree). The allowed degrees are
  the powers of two up to the largest degree (`chain`: they always pack, so the planner can always fall back on
  them), then, while the budget allows, the extra degrees in the order of `extra_degree_candidates` (3 x 2^k
  first: a group of 3 x 2^k ranks leaves the rest of its slot to one power-of-two group of 2^k).

Hybrid groups (Ulysses inside blocks of u ranks, ring across them: `hybrid_split`) also communicate over their
rings, which are no contiguous range: one more communicator per member for each degree that may run hybrid. Each
degree has one split (`cost.hybrid_costs.HybridSplitRule`: u a power of two, so its blocks are slot-grid groups of
the chain), and a degree runs hybrid only above the block limit (groups that Ulysses cannot keep inside a node:
they cross nodes or exceed the heads; below it hybrid gained at most 0.12%, `cost.hybrid_costs`) and where the
catalogue admits it: after the powers of two, the hybrid splits of the chain's degrees above the block limit,
smallest first, then the extra degrees (3 x 2^k first), while the budget allows (extra degrees run ring or Ulysses
only). A budget raised above the default admits more of them.

Being fixed at start, the catalogue is the same on every rank and in a resumed run, `prewarm` can create all of
it, and the memory model counts exactly the communicators a rank may hold (`worst`).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from mindspeed_mm.core.fcp.cost.hybrid_costs import HybridSplitRule
from mindspeed_mm.core.fcp.solver.hybrid_split import HYBRID, HybridSplit, communicator_rank_sets
from mindspeed_mm.core.fcp.solver.placement import slot_of
from mindspeed_mm.core.fcp.solver.plan import IDLE, Plan

BUDGET_ABOVE_LOG2 = 4
"""The default budget is ceil(log2 N) + this: the power-of-two chain and the plane (log2 N + 1 at most) leave
about four communicators per rank for other degrees."""


def default_budget(num_ranks: int) -> int:
    """Communicators a rank may join by default: ceil(log2 N) + `BUDGET_ABOVE_LOG2`."""
    return math.ceil(math.log2(num_ranks)) + BUDGET_ABOVE_LOG2 if num_ranks > 1 else BUDGET_ABOVE_LOG2


def group_communicators(ranks: Sequence[int], algo: str, hybrid_ulysses: int = 0) -> tuple[tuple[int, ...], ...]:
    """The communicators a planned group on `ranks` running `algo` needs: one of all its ranks for ring and
    Ulysses (both exchange over the whole group), and for a hybrid group of blocks of `hybrid_ulysses` ranks also
    its blocks and rings (`hybrid_split.communicator_rank_sets`); none for a group of one rank or of idle ranks.
    Every count of communicators goes through here."""
    if len(ranks) < 2 or algo == IDLE:
        return ()
    if algo == HYBRID and hybrid_ulysses >= 2:
        return communicator_rank_sets(ranks, HybridSplit(hybrid_ulysses, len(ranks) // hybrid_ulysses))
    return (tuple(ranks),)


def plan_communicators(plan: Plan) -> set[tuple[int, ...]]:
    """Every communicator `plan` runs on (FCP ranks): its groups', and the plane's when a round spreads its media."""
    found = {c for r in plan.rounds for g in r.groups if g.algo != IDLE for c in g.communicator_rank_sets()}
    if plan.num_ranks > 1 and any(r.vision_over_round for r in plan.rounds):
        found.add(tuple(range(plan.num_ranks)))
    return found


def extra_degree_candidates(max_degree: int) -> Iterator[int]:
    """The degrees other than powers of two, in the order the budget admits them: 3 x 2^k, then 5 x 2^k, 7 x 2^k,
    ... each smallest first, up to `max_degree` (3, 6, 12, 24, ... first: with the powers of two no allowed degree is
    then more than 1.5 times the next smaller one)."""
    for odd in range(3, max_degree + 1, 2):
        degree = odd
        while degree <= max_degree:
            yield degree
            degree *= 2


@dataclass(frozen=True)
class GroupCatalogue:
    """The groups a run's plans may use (FCP ranks 0..num_ranks-1 of one plane)."""

    num_ranks: int
    """N, the ranks of one plane."""
    max_degree: int
    """The largest degree the run allows (`SolverConfig.degree_limit`)."""
    degrees: tuple[int, ...] | None
    """The degrees above 1 on the slot grid, ascending; None: every contiguous range of 2..max_degree ranks."""
    plane: bool
    """The plane's own group is one of the run's communicators (rounds spreading their media over all ranks)."""
    algos: tuple[str, ...]
    """The attention algorithms the groups may run (their communicators: `group_communicators`)."""
    budget: int | None
    """Communicators a rank may join; None: unbounded (every contiguous range, as a budget-free ablation)."""
    counts: tuple[int, ...] = field(default=(), compare=False)
    """counts[r]: the communicators of the catalogue rank r is a member of."""
    hybrid_block: int = 0
    """The largest block of a hybrid group (`HybridSplitRule.block`; 0: no hybrid group)."""
    hybrid_degrees: tuple[int, ...] = ()
    """The degrees whose groups may run hybrid, each with its rule's split, ascending."""

    @property
    def hybrid_rule(self) -> HybridSplitRule:
        """The split of each degree admitted to run hybrid."""
        return HybridSplitRule(self.hybrid_block, frozenset(self.hybrid_degrees))

    def _hybrid_ulysses(self, degree: int) -> int:
        return self.hybrid_rule.ulysses_of(degree) if HYBRID in self.algos else 0

    @property
    def contiguous(self) -> bool:
        """Every contiguous range is allowed (placement is free)."""
        return self.degrees is None

    @property
    def worst(self) -> int:
        """The most communicators any rank may join."""
        return max(self.counts, default=0)

    @property
    def chain(self) -> tuple[int, ...]:
        """The allowed powers of two, ascending (with 1): degrees of a layout that always packs on the grid."""
        if self.degrees is None:
            return tuple(1 << k for k in range(self.max_degree.bit_length()))
        return (1,) + tuple(d for d in self.degrees if d & (d - 1) == 0)

    @property
    def search_degrees(self) -> tuple[int, ...] | None:
        """The degrees the planner's search may give a group (with 1); None: any."""
        return None if self.degrees is None else (1,) + self.degrees

    @property
    def top_degree(self) -> int:
        """The largest degree a group may have."""
        return self.max_degree if self.degrees is None else max(self.degrees, default=1)

    def allows(self, start: int, degree: int) -> bool:
        """Whether the group of ranks start .. start + degree - 1 is in the catalogue."""
        if degree == 1:
            return 0 <= start < self.num_ranks
        if not (0 <= start and start + degree <= self.num_ranks and degree <= self.max_degree):
            return False
        return self.degrees is None or (degree in self.degrees and start % slot_of(degree) == 0)

    def groups(self) -> list[tuple[int, ...]]:
        """Every multi-rank group of the catalogue (FCP ranks), by degree then start."""
        degrees = range(2, self.max_degree + 1) if self.degrees is None else self.degrees
        return [tuple(range(start, start + degree)) for degree in degrees
                for start in range(0, self.num_ranks - degree + 1, 1 if self.degrees is None else slot_of(degree))]

    def communicators(self) -> list[tuple[int, ...]]:
        """Every communicator the catalogue's groups may run on, and the plane's (FCP ranks), sorted."""
        found = {c for ranks in self.groups() for algo in self.algos
                 for c in group_communicators(ranks, algo, self._hybrid_ulysses(len(ranks)))}
        if self.plane and self.num_ranks > 1:
            found.add(tuple(range(self.num_ranks)))
        return sorted(found)

    @property
    def guaranteed_degree(self) -> int:
        """The most ranks a sample may need for every batch to have a plan: the widest static layout of catalogue
        groups holds any batch whose samples fit it (the planner's last resort); every contiguous range: the
        largest degree."""
        return self.max_degree if self.degrees is None else max(self.static_degrees())

    def static_degrees(self) -> tuple[int, ...]:
        """Degrees d of the static DP x CP layouts made of catalogue groups (d divides N; its groups at every
        multiple of d are allowed)."""
        return tuple(d for d in range(1, self.max_degree + 1) if self.num_ranks % d == 0
                     and all(self.allows(start, d) for start in range(0, self.num_ranks, d)))

    def check_plan(self, plan: Plan) -> None:
        """Raises `InvalidPlanError` naming the round and the group when a plan uses a group outside the catalogue."""
        from mindspeed_mm.core.fcp.solver.errors import InvalidPlanError

        for index, round_plan in enumerate(plan.rounds):
            for group in round_plan.groups:
                if not self.allows(group.ranks[0], group.degree):
                    raise InvalidPlanError(
                        f"round {index}, group on ranks {group.ranks[0]}..{group.ranks[-1]}: not one of the run's "
                        f"{self.describe()}")
                if group.hybrid is not None and group.hybrid.ulysses_degree not in (
                        1, group.degree, self._hybrid_ulysses(group.degree)):
                    raise InvalidPlanError(
                        f"round {index}, group on ranks {group.ranks[0]}..{group.ranks[-1]}: hybrid split "
                        f"{group.hybrid.ulysses_degree} x {group.hybrid.ring_degree} is not the run's (hybrid degrees "
                        f"{list(self.hybrid_degrees) or 'none'}, blocks of at most {self.hybrid_block} ranks)")

    def describe(self) -> str:
        """The catalogue in words (for logs and errors)."""
        if self.degrees is None:
            kind = f"every contiguous range of 2..{self.max_degree} ranks"
        else:
            kind = f"groups of degrees {', '.join(map(str, self.degrees)) or 'none'} on the aligned slot grid"
        limit = "no budget" if self.budget is None else f"budget {self.budget}"
        hybrid = f", hybrid on degrees {', '.join(map(str, self.hybrid_degrees))}" if self.hybrid_degrees else ""
        return f"{kind}{hybrid} (at most {self.worst} communicators per rank, {limit})"


def group_catalogue(num_ranks: int, max_degree: int, budget: int | None, algos: Sequence[str],
                    plane: bool, hybrid_block: int = 0) -> GroupCatalogue:
    """The catalogue of a run: every contiguous range where they all fit `budget`, else the slot grid's powers of two
    up to `max_degree` (smallest first, while they fit) and the hybrid splits and extra degrees the budget leaves
    room for (module docstring); `hybrid_block`: the largest block of a hybrid group (`CostModel.hybrid_rule`)."""
    return _catalogue(int(num_ranks), int(max_degree), budget, tuple(algos), bool(plane), int(hybrid_block))


@lru_cache(maxsize=64)
def budget_guaranteeing(num_ranks: int, max_degree: int, algos: Sequence[str], plane: bool, needed: int,
                        hybrid_block: int = 0) -> int | None:
    """The smallest budget whose catalogue guarantees a plan to samples of `needed` ranks (`guaranteed_degree`);
    None when none does (`needed` above `max_degree`)."""
    if needed > max_degree:
        return None
    budget = 1
    while True:
        catalogue = group_catalogue(num_ranks, max_degree, budget, algos, plane, hybrid_block)
        if catalogue.guaranteed_degree >= needed:
            return budget
        if catalogue.contiguous:
            return None
        budget += 1


@lru_cache(maxsize=256)
def _catalogue(num_ranks: int, max_degree: int, budget: int | None, algos: tuple[str, ...],
               plane: bool, hybrid_block: int) -> GroupCatalogue:
    """Built once per run's settings (the planner asks every batch; a catalogue is immutable)."""
    rule = HybridSplitRule(hybrid_block if HYBRID in algos else 0)
    split_degrees = [d for d in range(2, max_degree + 1) if rule.ulysses_of(d)]
    if budget is None:
        # The budget-free ablation: every range, every split, counted by formula (enumerating them is quadratic in N).
        counts = _contiguous_counts(num_ranks, max_degree, plane)
        for degree in split_degrees:
            counts += _range_counts(num_ranks, degree)   # each range holding a rank gives it one ring
        return GroupCatalogue(num_ranks, max_degree, None, plane, algos, None, tuple(counts.tolist()), hybrid_block,
                              tuple(split_degrees))
    contiguous = _contiguous_counts(num_ranks, max_degree, plane)
    if max(0, max_degree - 1) <= budget and contiguous.max() <= budget:
        admitted = []
        for degree in split_degrees:
            trial = contiguous + _range_counts(num_ranks, degree)
            if trial.max() <= budget:
                contiguous, admitted = trial, admitted + [degree]
        return _counted(GroupCatalogue(num_ranks, max_degree, None, plane, algos, budget, (), hybrid_block,
                                       tuple(admitted)))
    # Degrees are added while every rank stays within the budget: rank 0 is in every degree's first group (and in a
    # ring of every hybrid degree), so the additions stop once it is full.
    plane_count = _counted(GroupCatalogue(num_ranks, max_degree, (), plane, algos, budget))
    counts = np.asarray(plane_count.counts, dtype=np.int64)
    # The plane as a group of N ranks is the plane's own communicator: free where groups may span the plane.
    chosen: list[int] = [num_ranks] if plane and max_degree == num_ranks > 1 else []
    hybrid: list[int] = []
    held = set(plane_count.communicators())

    def admit(added: set[tuple[int, ...]]) -> bool:
        nonlocal counts
        trial = counts.copy()
        for members in added:
            trial[list(members)] += 1
        if trial.max() > budget:
            return False
        counts = trial
        held.update(added)
        return True

    for degree in (1 << k for k in range(1, max_degree.bit_length())):
        if counts[0] >= budget:
            break
        if degree not in chosen:
            if not admit(_new_communicators(num_ranks, degree, algos, held)):
                break   # the powers of two stay a chain (each divides the next): they always pack
            chosen.append(degree)
    # Then the hybrid splits of the chain's degrees Ulysses cannot keep in a node (above the block limit), smallest
    # first, then the extra degrees (3 x 2^k first). Hybrid first: on 2 image + video samples per rank, 256 H200s,
    # 100 steps, the extra degrees first made the budgeted plans 17.1% slower than unbounded ones, the hybrid splits
    # first 2.3% (benchmarks/results/communicator_budget.md).
    extras = [(d, False) for d in extra_degree_candidates(max_degree) if d & (d - 1)]
    threes = [c for c in extras if c[0] % 3 == 0 and (c[0] // 3) & (c[0] // 3 - 1) == 0]
    candidates = sorted([(d, True) for d in chosen if d > rule.block and rule.ulysses_of(d)]) + threes
    candidates += [c for c in extras if c not in threes]
    for degree, as_hybrid in candidates:
        if counts[0] >= budget:
            break
        if as_hybrid:
            u = rule.ulysses_of(degree)
            if degree in chosen and u and admit(_new_communicators(num_ranks, degree, (HYBRID,), held, u)):
                hybrid.append(degree)
        elif degree not in chosen and admit(_new_communicators(num_ranks, degree, algos, held)):
            chosen.append(degree)
    return GroupCatalogue(num_ranks, max_degree, tuple(sorted(chosen)), plane, algos, budget, tuple(counts.tolist()),
                          hybrid_block, tuple(sorted(hybrid)))


def _new_communicators(num_ranks: int, degree: int, algos: tuple[str, ...],
                       held: set[tuple[int, ...]], hybrid_ulysses: int = 0) -> set[tuple[int, ...]]:
    """The communicators of the slot grid's groups of `degree` (hybrid ones in blocks of `hybrid_ulysses`) not
    already in `held`."""
    groups = (tuple(range(start, start + degree)) for start in range(0, num_ranks - degree + 1, slot_of(degree)))
    return {c for ranks in groups for algo in algos for c in group_communicators(ranks, algo, hybrid_ulysses)} - held


def _counted(catalogue: GroupCatalogue) -> GroupCatalogue:
    """`catalogue` with the communicators of each rank counted (through `group_communicators`)."""
    counts = np.zeros(catalogue.num_ranks, dtype=np.int64)
    for members in catalogue.communicators():
        counts[list(members)] += 1
    return dataclasses.replace(catalogue, counts=tuple(counts.tolist()))


def _range_counts(num_ranks: int, degree: int) -> np.ndarray:
    """counts[r]: the contiguous ranges of `degree` ranks holding rank r."""
    ranks = np.arange(num_ranks)
    return np.minimum(ranks, num_ranks - degree) - np.maximum(0, ranks - degree + 1) + 1


def _contiguous_counts(num_ranks: int, max_degree: int, plane: bool) -> np.ndarray:
    """counts[r]: the contiguous ranges of 2..max_degree ranks (and the plane) holding rank r."""
    counts = np.zeros(num_ranks, dtype=np.int64)
    for degree in range(2, max_degree + 1):
        counts += _range_counts(num_ranks, degree)
    if plane and 1 < num_ranks and max_degree < num_ranks:
        counts += 1
    return counts


__all__ = ["BUDGET_ABOVE_LOG2", "GroupCatalogue", "budget_guaranteeing", "default_budget", "extra_degree_candidates",
           "group_catalogue", "group_communicators", "plan_communicators"]
