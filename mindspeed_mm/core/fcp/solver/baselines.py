"""Baseline layouts on the FCP cost model: what existing context-parallel systems run for a batch.

Each baseline returns the same `Plan` type as the FCP planner, timed by the same `CostModel`, so
validation, simulation and reports treat all strategies alike.

- ``megatron_static_cp``: Megatron-LM ring CP with a degree fixed for the whole run (the smallest
  divisor of N whose groups hold the run's longest sample), DP = N / CP. Each replica packs several
  samples per micro-batch (THD packed sequences) up to CP x capacity tokens. All replicas run the
  same number of micro-batches (rounds): the fewest that hold the batch; samples are spread over
  the rounds x DP micro-batches longest first, each to the least-loaded one with room, and the
  slowest micro-batches share a round. A round lasts as long as its slowest replica. This spread
  is balanced on purpose (Megatron's own packer fills packs in input order and is slower), so
  the speedups measured against it are conservative.
- ``deepspeed_ulysses``: the same layout with Ulysses all-to-all attention; the degree must also
  divide the attention heads.
- ``mcore_dynamic_cp``: Megatron-Core dynamic CP: each sample gets the power-of-two degree that
  holds it; per round, longest first, a sample opens a new group while ranks are free, otherwise
  joins the least-loaded group of its degree that has memory left, otherwise waits for the next
  round. Ranks left free at the end of a round are absorbed by doubling the smallest groups.
  Groups are power-of-two sized and aligned.
- ``mindspeed_dp_cp_switch``: MindSpeed-MM dynamic DP/CP switch: one homogeneous DP x CP layout
  per step, the first feasible CP in increasing order (most DP), then the same spread as above.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel, GroupWorkload
from mindspeed_mm.core.fcp.solver.errors import InfeasibleSampleError
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer, SampleWorkloads
from mindspeed_mm.core.fcp.solver.lower_bound import step_lower_bound
from mindspeed_mm.core.fcp.solver.placement import compact_node_part, placed_node_part
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, Plan, RoundPlan, SolverConfig
from mindspeed_mm.core.fcp.solver.rounds import min_rounds

RING = "ring"
ULYSSES = "ulysses"


class BaselineInfeasibleError(ValueError):
    """A baseline strategy cannot run this batch on this cluster; the message names the reason."""


class BaselinePlanner(Protocol):
    """Signature shared by the baselines (`cp_degree` is only used by static strategies)."""

    def __call__(
        self,
        lengths: Sequence[int],
        cost: CostModel,
        config: SolverConfig,
        patches: Sequence[int] | None = None,
        *,
        cp_degree: int | None = None,
    ) -> Plan: ...


@dataclass(frozen=True)
class Baseline:
    """A registered baseline strategy."""

    name: str
    """Registry name, as used on the command line."""
    planner: BaselinePlanner
    """Builds the strategy's plan for one global batch."""
    static_algo: str | None
    """For static strategies, the algo whose CP degree is fixed for a whole run; None if per batch."""


def _checked_lengths(
    lengths: Sequence[int], cost: CostModel, config: SolverConfig, patches: Sequence[int] | None
) -> np.ndarray:
    """The batch as int64, after the checks every planner applies."""
    values = np.asarray(lengths)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("the batch is empty: at least one sample length is needed")
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"sample lengths must be integers, got dtype {values.dtype}")
    bad = np.flatnonzero(values <= 0)
    if bad.size:
        raise ValueError(f"sample {int(bad[0])}: length must be positive, got {int(values[bad[0]])}")
    if patches is not None and len(patches) != values.size:
        raise ValueError(f"patches has {len(patches)} entries for {values.size} samples")
    limit = config.degree_limit
    for index in np.flatnonzero(values > limit * cost.capacity_tokens):
        raise InfeasibleSampleError(int(index), int(values[index]), cost.capacity_tokens, limit)
    return values.astype(np.int64)


def _workload(
    cost: CostModel, samples: Sequence[int], lengths: np.ndarray, patches: Sequence[int] | None
) -> GroupWorkload:
    return cost.workload(
        [int(lengths[s]) for s in samples], None if patches is None else [int(patches[s]) for s in samples]
    )


def _group(
    first_rank: int,
    degree: int,
    algo: str,
    samples: Sequence[int],
    lengths: np.ndarray,
    patches: Sequence[int] | None,
    cost: CostModel,
    ranks_per_node: int,
    workload: GroupWorkload | None = None,
) -> GroupPlan:
    """A group on ranks first_rank.. timed by the cost model where it is placed (`workload` if
    already aggregated)."""
    if workload is None:
        workload = _workload(cost, samples, lengths, patches)
    part = placed_node_part(first_rank, degree, ranks_per_node)
    predicted = float(cost.group_time_ms(workload, degree, algo, node_part=part))
    return GroupPlan(
        ranks=tuple(range(first_rank, first_rank + degree)),
        degree=degree,
        algo=algo,
        samples=tuple(sorted(samples)),
        predicted_ms=predicted,
    )


def _block(index: int, degree: int) -> tuple[int, ...]:
    """Ranks of the index-th block of `degree` contiguous ranks."""
    return tuple(range(index * degree, (index + 1) * degree))


def _round(groups: Sequence[GroupPlan]) -> RoundPlan:
    ordered = tuple(sorted(groups, key=lambda g: g.ranks[0]))
    return RoundPlan(groups=ordered, predicted_ms=max(g.predicted_ms for g in ordered))


def _batch_lower_bound(
    lengths: np.ndarray, cost: CostModel, config: SolverConfig, patches: Sequence[int] | None
) -> float:
    """The planner's lower bound for this batch, so every strategy is measured against the same bound."""
    values = [int(x) for x in lengths]
    extra = None if patches is None else [int(p) for p in patches]
    workloads = SampleWorkloads(cost, np.asarray(values, dtype=np.int64),
                                None if extra is None else np.asarray(extra, dtype=np.int64))
    timer = GroupTimer(cost, config.degree_limit)
    rounds = min_rounds(values, config.num_ranks, cost.capacity_tokens)
    return step_lower_bound(cost, workloads, values, extra, timer, config.num_ranks, rounds)


def _plan(
    rounds: Sequence[RoundPlan],
    lengths: np.ndarray,
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None,
    started: float,
    extras: dict[str, object],
) -> Plan:
    bound = _batch_lower_bound(lengths, cost, config, patches)
    return Plan(
        rounds=tuple(rounds),
        predicted_ms=float(sum(r.predicted_ms for r in rounds)),
        lower_bound_ms=float(bound),
        solver_ms=(time.perf_counter() - started) * 1e3,
        num_ranks=config.num_ranks,
        extras={**extras, "ranks_per_node": config.ranks_per_node},
    )


def static_cp_degree(max_length: int, cost: CostModel, config: SolverConfig, algo: str) -> int:
    """Smallest CP degree of a homogeneous DP x CP layout that holds a sample of `max_length` tokens.

    The degree must divide N (DP = N / CP), respect the maximum degree and, for Ulysses, divide the
    attention heads. Raises BaselineInfeasibleError when no degree qualifies.
    """
    needed = cost.min_degree(int(max_length))
    candidates = [
        d
        for d in range(max(needed, 1), config.degree_limit + 1)
        if config.num_ranks % d == 0 and (algo != ULYSSES or cost.ulysses_supported(d))
    ]
    if not candidates:
        heads = " that Ulysses supports (divides the heads)" if algo == ULYSSES else ""
        raise BaselineInfeasibleError(
            f"no {algo} CP degree between {needed} (to hold {max_length} tokens at {cost.capacity_tokens} "
            f"tokens per rank) and {config.degree_limit} divides {config.num_ranks} ranks{heads}"
        )
    return candidates[0]


def _balanced_packs(
    lengths: np.ndarray,
    patches: Sequence[int] | None,
    cost: CostModel,
    degree: int,
    algo: str,
    replicas: int,
) -> list[list[int]]:
    """Samples spread over rounds x replicas micro-batches of at most degree x capacity tokens.

    The fewest rounds whose micro-batches hold the batch, samples dealt longest-time first to the
    least-loaded micro-batch with room (so every micro-batch gets at least one sample).
    """
    capacity = degree * cost.capacity_tokens
    columns = cost.workload_columns(lengths, None if patches is None else np.asarray(patches))
    alone_ms = cost.group_time_table(columns, np.full((lengths.size, 1), degree, dtype=np.int64), algo)[:, 0].tolist()
    order = sorted(range(lengths.size), key=lambda i: (-alone_ms[i], -int(lengths[i]), i))
    fewest_packs = -(-int(lengths.sum()) // capacity)
    rounds = max(1, -(-fewest_packs // replicas))
    while True:
        bins = rounds * replicas
        if bins > lengths.size:
            raise BaselineInfeasibleError(
                f"{lengths.size} samples cannot give each of the {replicas} data-parallel replicas a "
                f"micro-batch in each of {rounds} rounds"
            )
        load = np.zeros(bins)
        tokens = np.zeros(bins, dtype=np.int64)
        packs: list[list[int]] = [[] for _ in range(bins)]
        for i in order:
            room = tokens + lengths[i] <= capacity
            if not room.any():
                break
            b = int(np.argmin(np.where(room, load, np.inf)))
            packs[b].append(i)
            load[b] += alone_ms[i]
            tokens[b] += lengths[i]
        else:
            return packs
        rounds += 1


def _homogeneous_plan(
    lengths: np.ndarray,
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None,
    degree: int,
    algo: str,
    strategy: str,
    started: float,
) -> Plan:
    if config.num_ranks % degree != 0 or degree > config.degree_limit:
        raise BaselineInfeasibleError(
            f"{strategy}: CP degree {degree} must divide {config.num_ranks} ranks and be at most "
            f"{config.degree_limit}"
        )
    if algo == ULYSSES and not cost.ulysses_supported(degree):
        raise BaselineInfeasibleError(f"{strategy}: Ulysses cannot split the attention heads over {degree} ranks")
    longest = int(np.argmax(lengths))
    if cost.min_degree(int(lengths[longest])) > degree:
        raise BaselineInfeasibleError(
            f"{strategy}: sample {longest} ({int(lengths[longest])} tokens) does not fit CP degree {degree} "
            f"at {cost.capacity_tokens} tokens per rank"
        )
    replicas = config.num_ranks // degree
    rpn = config.ranks_per_node
    packs = [tuple(sorted(p)) for p in _balanced_packs(lengths, patches, cost, degree, algo, replicas)]
    columns = cost.workload_columns(lengths, None if patches is None else np.asarray(patches))
    sizes = [len(p) for p in packs]
    members = np.fromiter((i for p in packs for i in p), dtype=np.int64, count=sum(sizes))
    sums = columns.group_sums(members, np.repeat(np.arange(len(packs)), sizes), len(packs))
    pack_ms = cost.group_time_table(sums, np.full((len(packs), 1), degree, dtype=np.int64), algo)[:, 0].tolist()
    # Slowest micro-batches share a round: sorted chunks minimise the sum of the round maxima.
    order = sorted(range(len(packs)), key=lambda k: (-pack_ms[k], packs[k]))
    rounds = []
    for i in range(0, len(order), replicas):
        groups = []
        for j, k in enumerate(order[i : i + replicas]):
            first = j * degree
            if placed_node_part(first, degree, rpn) == compact_node_part(degree, rpn):
                groups.append(GroupPlan(_block(j, degree), degree, algo, packs[k], pack_ms[k]))
            else:   # a block across a node boundary pays the inter-node cost
                groups.append(_group(first, degree, algo, packs[k], lengths, patches, cost, rpn, sums.workload(k)))
        rounds.append(_round(groups))
    extras = {"strategy": strategy, "cp_degree": degree, "dp_degree": replicas}
    return _plan(rounds, lengths, cost, config, patches, started, extras)


def megatron_static_cp(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int | None = None,
) -> Plan:
    """Megatron-LM static ring CP; `cp_degree` is the run's degree (default: sized for this batch)."""
    started = time.perf_counter()
    values = _checked_lengths(lengths, cost, config, patches)
    degree = cp_degree if cp_degree is not None else static_cp_degree(int(values.max()), cost, config, RING)
    return _homogeneous_plan(values, cost, config, patches, degree, RING, "megatron_static_cp", started)


def deepspeed_ulysses(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int | None = None,
) -> Plan:
    """DeepSpeed-Ulysses static CP; `cp_degree` is the run's degree (default: sized for this batch)."""
    started = time.perf_counter()
    values = _checked_lengths(lengths, cost, config, patches)
    degree = cp_degree if cp_degree is not None else static_cp_degree(int(values.max()), cost, config, ULYSSES)
    return _homogeneous_plan(values, cost, config, patches, degree, ULYSSES, "deepspeed_ulysses", started)


def mindspeed_dp_cp_switch(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int | None = None,
) -> Plan:
    """MindSpeed-MM dynamic DP/CP switch: per batch, the smallest ring CP (most DP) that fits."""
    started = time.perf_counter()
    if cp_degree is not None:
        raise ValueError("mindspeed_dp_cp_switch chooses its CP degree per batch; cp_degree must be None")
    values = _checked_lengths(lengths, cost, config, patches)
    degree = static_cp_degree(int(values.max()), cost, config, RING)
    return _homogeneous_plan(values, cost, config, patches, degree, RING, "mindspeed_dp_cp_switch", started)


@dataclass
class _OpenGroup:
    """A group being filled during one round of the Megatron-Core dynamic CP schedule."""

    degree: int
    samples: list[int]
    tokens: int
    workload: GroupWorkload
    time_ms: float


def _next_power_of_two(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def mcore_dynamic_cp(
    lengths: Sequence[int],
    cost: CostModel,
    config: SolverConfig,
    patches: Sequence[int] | None = None,
    *,
    cp_degree: int | None = None,
) -> Plan:
    """Megatron-Core dynamic CP: power-of-two aligned ring groups, filled greedily round by round."""
    started = time.perf_counter()
    if cp_degree is not None:
        raise ValueError("mcore_dynamic_cp chooses a degree per sample; cp_degree must be None")
    values = _checked_lengths(lengths, cost, config, patches)
    n = config.num_ranks
    if n & (n - 1):
        raise BaselineInfeasibleError(
            f"mcore_dynamic_cp: power-of-two aligned groups cannot tile {n} ranks (not a power of two)"
        )
    limit = 1 << (config.degree_limit.bit_length() - 1)
    degrees = [_next_power_of_two(cost.min_degree(int(length))) for length in values.tolist()]
    for index, degree in enumerate(degrees):
        if degree > limit:
            raise BaselineInfeasibleError(
                f"mcore_dynamic_cp: sample {index} ({int(values[index])} tokens) needs a power-of-two degree "
                f"{degree} above the largest allowed power of two {limit}"
            )
    single = [_workload(cost, [i], values, patches) for i in range(values.size)]
    remaining = sorted(range(values.size), key=lambda i: (-int(values[i]), i))
    rounds: list[RoundPlan] = []
    while remaining:
        groups: list[_OpenGroup] = []
        free = n
        deferred: list[int] = []
        for s in remaining:
            degree, length = degrees[s], int(values[s])
            if free >= degree:
                time_ms = float(cost.group_time_ms(single[s], degree, RING))
                groups.append(_OpenGroup(degree, [s], length, single[s], time_ms))
                free -= degree
                continue
            room = degree * cost.capacity_tokens - length
            fitting = [g for g in groups if g.degree == degree and g.tokens <= room]
            if not fitting:
                deferred.append(s)
                continue
            target = min(fitting, key=lambda g: g.time_ms)
            target.samples.append(s)
            target.tokens += length
            target.workload = target.workload + single[s]
            target.time_ms = float(cost.group_time_ms(target.workload, degree, RING))
        while free:
            # N is a power of two, so the free ranks are a multiple of the smallest degree.
            smallest = min(g.degree for g in groups)
            target = max((g for g in groups if g.degree == smallest), key=lambda g: g.time_ms)
            free -= target.degree
            target.degree *= 2
            target.time_ms = float(cost.group_time_ms(target.workload, target.degree, RING))
        # Descending power-of-two sizes laid out back to back are aligned to their own size.
        groups.sort(key=lambda g: -g.degree)
        placed, first = [], 0
        for g in groups:
            placed.append(_group(first, g.degree, RING, g.samples, values, patches, cost, config.ranks_per_node,
                                 g.workload))
            first += g.degree
        rounds.append(_round(placed))
        remaining = deferred
    return _plan(rounds, values, cost, config, patches, started, {"strategy": "mcore_dynamic_cp"})


BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("megatron_static_cp", megatron_static_cp, RING),
        Baseline("deepspeed_ulysses", deepspeed_ulysses, ULYSSES),
        Baseline("mcore_dynamic_cp", mcore_dynamic_cp, None),
        Baseline("mindspeed_dp_cp_switch", mindspeed_dp_cp_switch, None),
    )
}
"""Baseline strategies by name."""


def get_baseline(name: str) -> Baseline:
    """The baseline registered as `name`; ValueError listing the known names otherwise."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline strategy {name!r}; choose one of {', '.join(BASELINES)}")
    return BASELINES[name]
