"""The planner's output: which ranks run which samples, with which algorithm, in which round.

A `Plan` is plain data: it crosses from the planner to the executor, is printed as JSON by the CLI
and is hashed so that every rank can check it holds the same layout.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from mindspeed_mm.core.fcp.solver.errors import InvalidPlanError
from mindspeed_mm.core.fcp.solver.hybrid_split import HYBRID, HybridSplit, communicator_rank_sets
from mindspeed_mm.core.fcp.solver.placement import placed_node_part
from mindspeed_mm.core.fcp.solver.short_shards import padding_length

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel
    from mindspeed_mm.core.fcp.solver.communicators import GroupCatalogue

_TIME_RTOL = 1e-9
IDLE = "idle"
"""Algo of a group of ranks that run nothing in a round (no samples, 0 ms)."""
LOCKSTEP = "lockstep"
"""Step semantics of FSDP: the ranks run every round together and pay each round's parameter traffic."""
INDEPENDENT = "independent"
"""Step semantics of DDP / the distributed optimizer: groups meet only at the step's gradient reduction."""
STEP_SEMANTICS = (LOCKSTEP, INDEPENDENT)
AUTO = "auto"
"""`SolverConfig.communicator_budget` of the default budget, ceil(log2 num_ranks) + 4 (`communicators.default_budget`)."""


@dataclass(frozen=True)
class SolverConfig:
    """Options of one planning problem."""

    num_ranks: int
    """N: the FCP ranks (data x context-parallel plane) to split into groups every round."""
    ranks_per_node: int = 8
    """Ranks sharing one node's fast intra-node link; groups that fit in a node stay in one."""
    max_degree: int | None = None
    """Largest allowed group degree; None means `num_ranks`."""
    max_rounds: int | None = None
    """Largest allowed number of rounds per step; None lets the planner choose."""
    allow_idle_ranks: bool = False
    """Let ranks sit a round out (`IDLE` groups) when a smaller group is faster than the ranks it
    would otherwise be given (one short sample on many ranks). Off by default. `fcp train` runs idle
    ranks (they move on to their next round); under Megatron's schedule (the MindSpeed feature) every
    rank runs every round, so its plans have none."""

    degrees: tuple[int, ...] | None = None
    """Group degrees the planner may use (ablations such as powers of two only); None: any."""
    step_semantics: str = LOCKSTEP
    """How the plan's rounds run (`step_time`). `INDEPENDENT`: the planner also weighs every static
    layout run as independent replicas, whose short replicas sit the last rounds out (`IDLE` groups),
    and keeps whichever finishes first when each group waits only for its own members."""
    vision_over_round: bool = True
    """Lockstep rounds may spread their media over all the round's ranks (`vision_phases`), not only over
    each group's members: MindSpeed-MM's Qwen3-VL path encodes a round so when its plan says
    `RoundPlan.vision_over_round`. False: each group encodes its own media (an ablation; `fcp train` plans
    independent groups, which this does not concern)."""
    thorough_search: bool = False
    """Plan every batch with the search small problems get (`planner._SMALL_PROBLEM`: several round
    counts and spreads, every uniform degree, every sample move), not only the small ones: about 100x
    the planner time of the fast search at 128 samples on 64 ranks. For measuring what the fast search
    leaves (`benchmarks/flexibility_report.py --strategies ...,fcp_thorough_search`)."""
    communicator_budget: int | str | None = AUTO
    """Communicators one rank may join over the whole run, the plane's own group included (`communicators`):
    `AUTO` is ceil(log2 num_ranks) + 4; None places groups on any ranks, unbounded (an ablation: today's plans
    without a budget)."""

    def __post_init__(self) -> None:
        budget = self.communicator_budget
        if budget is not None and budget != AUTO and (isinstance(budget, bool) or not isinstance(budget, int)
                                                      or budget < 1):
            raise ValueError(f"communicator_budget must be a positive integer, {AUTO!r} or None, got {budget!r}")
        if not isinstance(self.vision_over_round, bool):
            raise ValueError(f"vision_over_round must be a bool, got {self.vision_over_round!r}")
        if not isinstance(self.thorough_search, bool):
            raise ValueError(f"thorough_search must be a bool, got {self.thorough_search!r}")
        if self.step_semantics not in STEP_SEMANTICS:
            raise ValueError(f"step_semantics must be one of {', '.join(STEP_SEMANTICS)}, got {self.step_semantics!r}")
        if self.degrees is not None and (not self.degrees or any(
                isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in self.degrees) or 1 not in self.degrees):
            raise ValueError(f"degrees must be positive ints including 1 (so every rank count can be tiled), "
                             f"got {self.degrees!r}")
        if not isinstance(self.num_ranks, int) or self.num_ranks <= 0:
            raise ValueError(f"num_ranks must be a positive integer, got {self.num_ranks!r}")
        if not isinstance(self.ranks_per_node, int) or self.ranks_per_node <= 0:
            raise ValueError(f"ranks_per_node must be a positive integer, got {self.ranks_per_node!r}")
        if self.max_degree is not None and (
            not isinstance(self.max_degree, int) or not 1 <= self.max_degree <= self.num_ranks
        ):
            raise ValueError(
                f"max_degree must be an integer in [1, num_ranks={self.num_ranks}], got {self.max_degree!r}"
            )
        if self.max_rounds is not None and (not isinstance(self.max_rounds, int) or self.max_rounds <= 0):
            raise ValueError(f"max_rounds must be a positive integer, got {self.max_rounds!r}")

    @property
    def degree_limit(self) -> int:
        """The effective maximum group degree."""
        return self.num_ranks if self.max_degree is None else self.max_degree

    @property
    def budget(self) -> int | None:
        """The communicators one rank may join (`communicator_budget` with `AUTO` resolved); None: unbounded."""
        from mindspeed_mm.core.fcp.solver.communicators import default_budget

        if self.communicator_budget == AUTO:
            return default_budget(self.num_ranks)
        return self.communicator_budget  # type: ignore[return-value]

    def catalogue(self, algos: Sequence[str], hybrid_block: int = 0) -> "GroupCatalogue":
        """The groups plans may use (`communicators.group_catalogue`), for groups running `algos` (hybrid ones in
        blocks of at most `hybrid_block` ranks); the plane's group counts where rounds may spread their media over
        it (lockstep rounds with `vision_over_round`)."""
        from mindspeed_mm.core.fcp.solver.communicators import group_catalogue

        return group_catalogue(self.num_ranks, self.degree_limit, self.budget, algos,
                               plane=self.vision_over_round and self.step_semantics == LOCKSTEP,
                               hybrid_block=hybrid_block)


@dataclass(frozen=True)
class GroupPlan:
    """One context-parallel group of one round."""

    ranks: tuple[int, ...]
    """Contiguous global FCP ranks of the group, ascending."""
    degree: int
    """Context-parallel degree, equal to `len(ranks)`."""
    algo: str
    """How attention is split over the group: "ring", "ulysses" or "hybrid" (or `IDLE`)."""
    samples: tuple[int, ...]
    """Indices into the planner's input lengths, ascending (input order)."""
    predicted_ms: float
    """Predicted forward+backward time of the group's packed batch."""
    hybrid: HybridSplit | None = None
    """A hybrid group's Ulysses x ring split (`with_hybrid_splits` sets it); None for every other algo."""

    def __post_init__(self) -> None:
        if self.degree != len(self.ranks):
            raise InvalidPlanError(f"group on ranks {list(self.ranks)} declares degree {self.degree}")
        if self.hybrid is not None and (self.algo != HYBRID or self.hybrid.degree != self.degree):
            raise InvalidPlanError(f"group on ranks {list(self.ranks)}: a {self.hybrid.ulysses_degree} x "
                                   f"{self.hybrid.ring_degree} split belongs to a hybrid group of that degree, "
                                   f"not to algo {self.algo!r} of degree {self.degree}")

    @property
    def algo_label(self) -> str:
        """The algo as logs show it: `hybrid:<u>x<r>` for a hybrid group."""
        split = self.hybrid
        return self.algo if split is None else f"{self.algo}:{split.ulysses_degree}x{split.ring_degree}"

    def communicator_rank_sets(self) -> tuple[tuple[int, ...], ...]:
        """The rank sets this group needs a communicator for (`hybrid_split.communicator_rank_sets`)."""
        return communicator_rank_sets(self.ranks, self.hybrid)

    def to_json(self) -> dict[str, Any]:
        """The group as a JSON-ready dict (`hybrid` only for a hybrid group)."""
        out: dict[str, Any] = {
            "ranks": list(self.ranks),
            "degree": self.degree,
            "algo": self.algo,
            "samples": list(self.samples),
            "predicted_ms": self.predicted_ms,
        }
        if self.hybrid is not None:
            out["hybrid"] = self.hybrid.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "GroupPlan":
        """Reads a group written by `to_json`."""
        split = data.get("hybrid") if isinstance(data, dict) else None
        return cls(
            ranks=tuple(int(r) for r in _field(data, "ranks", "group")),
            degree=int(_field(data, "degree", "group")),
            algo=str(_field(data, "algo", "group")),
            samples=tuple(int(s) for s in _field(data, "samples", "group")),
            predicted_ms=float(_field(data, "predicted_ms", "group")),
            hybrid=None if split is None else HybridSplit.from_json(split),
        )


@dataclass(frozen=True)
class RoundPlan:
    """One forward+backward pass on every rank."""

    groups: tuple[GroupPlan, ...]
    """Groups of the round, ordered by first rank; together they cover ranks 0..N-1 exactly once."""
    predicted_ms: float
    """Predicted time of the round: the slowest group's time."""
    vision_ms: float | None = None
    """Rounds priced in lockstep phases (`vision_phases`): the round's vision phase, which every group's
    predicted time includes before its own decoder work. None: each group's time holds its own encoder work."""
    vision_over_round: bool = False
    """The round's media are encoded by all its ranks, not each group's by its own members (`vision_phases`)."""
    expert_coupled: bool = False
    """Priced as expert parallelism's blocks run it (`expert_phases`): each group's time is its slowest block's,
    whose experts' work and all-to-alls follow the block's tokens rather than the group's own."""

    def to_json(self) -> dict[str, Any]:
        """The round as a JSON-ready dict (the vision and expert fields only when set)."""
        out: dict[str, Any] = {"groups": [g.to_json() for g in self.groups], "predicted_ms": self.predicted_ms}
        if self.vision_ms is not None:
            out["vision_ms"] = self.vision_ms
        if self.vision_over_round:
            out["vision_over_round"] = True
        if self.expert_coupled:
            out["expert_coupled"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RoundPlan":
        """Reads a round written by `to_json`."""
        vision_ms = data.get("vision_ms") if isinstance(data, dict) else None
        return cls(
            groups=tuple(GroupPlan.from_json(g) for g in _field(data, "groups", "round")),
            predicted_ms=float(_field(data, "predicted_ms", "round")),
            vision_ms=None if vision_ms is None else float(vision_ms),
            vision_over_round=bool(data.get("vision_over_round", False)),
            expert_coupled=bool(data.get("expert_coupled", False)),
        )


@dataclass(frozen=True)
class Plan:
    """The layout of one global batch: R rounds of groups covering all N ranks."""

    rounds: tuple[RoundPlan, ...]
    """The rounds of the step, run one after the other by every rank."""
    predicted_ms: float
    """Predicted step time: the sum of the round times."""
    lower_bound_ms: float
    """A lower bound on the step time of any plan for this batch (see `lower_bound.py`)."""
    solver_ms: float
    """Wall-clock time the planner took; not part of the layout or its digest."""
    num_ranks: int
    """N, the number of FCP ranks the plan covers in every round."""
    extras: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Informational fields carried into the JSON (e.g. per-phase timings); not part of the digest."""

    @property
    def num_rounds(self) -> int:
        """R, the number of rounds."""
        return len(self.rounds)

    @property
    def gap_to_lower_bound(self) -> float:
        """predicted / lower bound: how far the plan can at most be from the optimum."""
        return self.predicted_ms / self.lower_bound_ms if self.lower_bound_ms > 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        """The plan in the documented JSON schema, plus `num_ranks` and any extras."""
        out: dict[str, Any] = {
            "rounds": [r.to_json() for r in self.rounds],
            "predicted_ms": self.predicted_ms,
            "lower_bound_ms": self.lower_bound_ms,
            "solver_ms": self.solver_ms,
            "num_ranks": self.num_ranks,
        }
        for key, value in self.extras.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Plan":
        """Reads a plan from the JSON schema; `num_ranks` defaults to the ranks of the first round."""
        rounds = tuple(RoundPlan.from_json(r) for r in _field(data, "rounds", "plan"))
        if "num_ranks" in data:
            num_ranks = int(data["num_ranks"])
        elif rounds:
            num_ranks = sum(g.degree for g in rounds[0].groups)
        else:
            raise InvalidPlanError("plan JSON has no rounds and no 'num_ranks' field")
        known = {"rounds", "predicted_ms", "lower_bound_ms", "solver_ms", "num_ranks"}
        return cls(
            rounds=rounds,
            predicted_ms=float(_field(data, "predicted_ms", "plan")),
            lower_bound_ms=float(_field(data, "lower_bound_ms", "plan")),
            solver_ms=float(_field(data, "solver_ms", "plan")),
            num_ranks=num_ranks,
            extras={k: v for k, v in data.items() if k not in known},
        )

    def digest(self) -> str:
        """sha256 (hex) of the canonical JSON of the layout and predictions, without timings/extras."""
        layout = {
            "rounds": [r.to_json() for r in self.rounds],
            "predicted_ms": self.predicted_ms,
            "lower_bound_ms": self.lower_bound_ms,
            "num_ranks": self.num_ranks,
        }
        canonical = json.dumps(layout, sort_keys=True, separators=(",", ":"), allow_nan=True)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def groups_of_rank(self, rank: int) -> list[GroupPlan]:
        """The group holding `rank` in each round, in round order."""
        if not 0 <= rank < self.num_ranks:
            raise ValueError(f"rank {rank} is outside 0..{self.num_ranks - 1}")
        found = []
        for index, round_plan in enumerate(self.rounds):
            group = next((g for g in round_plan.groups if rank in g.ranks), None)
            if group is None:
                raise InvalidPlanError(f"round {index} has no group holding rank {rank}")
            found.append(group)
        return found


def validate_plan(
    plan: Plan,
    lengths: Sequence[int],
    cost: "CostModel",
    patches: Sequence[int] | None = None,
    *,
    priced: bool = False,
) -> None:
    """Raises `InvalidPlanError` unless `plan` is executable for this batch.

    Checks: every sample in exactly one group; each round's groups are contiguous rank ranges that
    cover 0..N-1 exactly once (so degrees sum to N); every group fits in memory (with the padding document
    its samples may need, `short_shards`) and its algo is feasible at its degree (finite predicted time; a hybrid
    group carries a split whose blocks sit inside nodes where it is placed); round and step times are consistent. With
    `priced`, also that no group's predicted time is below the cost model's time of the group where
    it is placed (a group crossing a node pays the inter-node cost): planners' and baselines' plans,
    not hand-written ones.
    """
    n = plan.num_ranks
    # The node size the plan was placed with (the planner records it), else the cost model's.
    node = int(plan.extras.get("ranks_per_node", cost.ranks_per_node))
    seen: dict[int, int] = {}
    for r, round_plan in enumerate(plan.rounds):
        covered = 0
        for group in sorted(round_plan.groups, key=lambda g: g.ranks[0] if g.ranks else -1):
            where = f"round {r}, group on ranks {list(group.ranks)}"
            if group.degree < 1:
                raise InvalidPlanError(f"{where}: degree must be >= 1")
            if group.ranks != tuple(range(group.ranks[0], group.ranks[0] + group.degree)):
                raise InvalidPlanError(f"{where}: ranks are not a contiguous ascending range")
            if group.ranks[0] != covered:
                raise InvalidPlanError(f"round {r}: ranks {covered}.. are not covered exactly once")
            covered += group.degree
            if group.algo == IDLE:
                if group.samples or group.predicted_ms != 0.0:
                    raise InvalidPlanError(f"{where}: an idle group holds no samples and takes 0 ms")
                continue
            if group.algo not in cost.algos:
                raise InvalidPlanError(f"{where}: unknown algo {group.algo!r}")
            if not group.samples:
                raise InvalidPlanError(f"{where}: group has no samples")
            for s in group.samples:
                if not 0 <= s < len(lengths):
                    raise InvalidPlanError(f"{where}: sample index {s} outside 0..{len(lengths) - 1}")
                if s in seen:
                    raise InvalidPlanError(f"{where}: sample {s} already planned in round {seen[s]}")
                seen[s] = r
            samples = [int(lengths[s]) for s in group.samples]
            padding = padding_length(samples, group.degree)
            tokens = sum(samples) + padding
            if cost.min_degree(tokens) > group.degree:
                padded = f" (with the {padding}-token padding document of its short samples)" if padding else ""
                raise InvalidPlanError(
                    f"{where}: {tokens} tokens{padded} exceed the memory of {group.degree} ranks "
                    f"({cost.capacity_tokens} tokens per rank)"
                )
            phased = round_plan.vision_ms is not None
            workload = cost.workload(
                [int(lengths[s]) for s in group.samples],
                None if patches is None or phased else [int(patches[s]) for s in group.samples],
            )
            part = placed_node_part(group.ranks[0], group.degree, node)
            split = _checked_split(group, where)
            at_split = {} if split is None else {"ulysses_degree": split}
            placed_ms = float(cost.group_time_ms(workload, group.degree, group.algo, node_part=part, **at_split))
            if phased:
                placed_ms += round_plan.vision_ms
            if round_plan.expert_coupled:
                # Its experts' work and all-to-alls follow its block's tokens (`expert_phases`): the group's own
                # work before them is the floor.
                from mindspeed_mm.core.fcp.solver.expert_phases import own_expert_ms

                placed_ms -= float(own_expert_ms(cost, tokens / group.degree))
            if not math.isfinite(placed_ms):
                how = "" if split is None else f" split {split} x {group.degree // split} (blocks inside nodes)"
                raise InvalidPlanError(f"{where}: algo {group.algo!r}{how} is infeasible at degree {group.degree}")
            if priced and group.predicted_ms < placed_ms * (1 - 1e-6):
                raise InvalidPlanError(f"{where}: predicted {group.predicted_ms} ms is below the {placed_ms} ms "
                                       f"the cost model gives the group where it is placed")
        if covered != n:
            raise InvalidPlanError(f"round {r}: degrees sum to {covered}, expected num_ranks={n}")
        if priced and round_plan.vision_ms is not None:
            from mindspeed_mm.core.fcp.solver.vision_phases import vision_phase_ms

            phase_ms = vision_phase_ms(round_plan, patches, cost, round_plan.vision_over_round)
            if round_plan.vision_ms < phase_ms * (1 - 1e-6):
                raise InvalidPlanError(f"round {r}: vision phase {round_plan.vision_ms} ms is below the {phase_ms} ms "
                                       "the cost model gives its media")
        slowest = max((g.predicted_ms for g in round_plan.groups), default=0.0)
        if not math.isclose(round_plan.predicted_ms, slowest, rel_tol=_TIME_RTOL):
            raise InvalidPlanError(f"round {r}: predicted {round_plan.predicted_ms} ms != slowest group {slowest} ms")
    missing = sorted(set(range(len(lengths))) - set(seen))
    if missing:
        raise InvalidPlanError(f"samples {missing[:10]} are in no group ({len(missing)} missing)")
    total = sum(r.predicted_ms for r in plan.rounds)
    if not math.isclose(plan.predicted_ms, total, rel_tol=_TIME_RTOL):
        raise InvalidPlanError(f"plan predicted {plan.predicted_ms} ms != sum of rounds {total} ms")


def _checked_split(group: GroupPlan, where: str) -> int | None:
    """A hybrid group's u (it must carry its split); None for other algos."""
    if group.algo != HYBRID:
        return None
    if group.hybrid is None:
        raise InvalidPlanError(f"{where}: a hybrid group must carry its Ulysses x ring split")
    return group.hybrid.ulysses_degree


def _field(data: dict[str, Any], name: str, what: str) -> Any:
    """`data[name]`, or an error naming the missing field."""
    if not isinstance(data, dict):
        raise InvalidPlanError(f"{what} JSON must be an object, got {type(data).__name__}")
    if name not in data:
        raise InvalidPlanError(f"{what} JSON lacks field {name!r}")
    return data[name]
