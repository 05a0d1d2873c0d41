"""`plan_batch`: the FCP planner for one global batch.

Feasibility checks, round formation (several R tried), per round stage 1 packing + stage 2 degree
assignment + local search (`round_layout`), node-aware placement, lower bound. Pure Python/numpy and
deterministic: the same inputs give the same plan and digest on every rank.
"""
from __future__ import annotations

import logging
import operator
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.errors import InfeasibleSampleError
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer
from mindspeed_mm.core.fcp.solver.lower_bound import step_lower_bound
from mindspeed_mm.core.fcp.solver.packing import min_degree_for
from mindspeed_mm.core.fcp.solver.placement import place_groups
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, Plan, RoundPlan, SolverConfig
from mindspeed_mm.core.fcp.solver.round_layout import RoundChoice, RoundSolver, SampleFacts, SearchLimits
from mindspeed_mm.core.fcp.solver.rounds import fill_rounds, min_rounds, round_counts, spread_over_rounds

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel

logger = logging.getLogger(__name__)

# Problems up to this many samples x ranks get the thorough search (every move, many R values).
_SMALL_PROBLEM = 256
_THOROUGH = SearchLimits(max_iterations=64, max_targets=1 << 30, max_movers=1 << 30,
                         bin_fractions=(1.0, 0.75, 0.5), uniform_degrees=1 << 30, first_improvement=False)
_FAST = SearchLimits(max_iterations=3, max_targets=3, max_movers=2, bin_fractions=(1.0,), uniform_degrees=1,
                     first_improvement=True)


def plan_batch(
    lengths: Sequence[int],
    cost: "CostModel",
    config: SolverConfig,
    patches: Sequence[int] | None = None,
) -> Plan:
    """Plans one global batch: rounds of contiguous CP groups covering all `config.num_ranks` ranks.

    `lengths[i]` is sample i's LLM tokens, `patches[i]` its vision-encoder patches (optional). Raises
    ValueError on an empty batch or a bad length / patch count (naming the sample index) and
    `InfeasibleSampleError` when a sample needs more ranks than `config.max_degree` allows.
    """
    started = time.perf_counter()
    lengths = _checked_lengths(lengths)
    patches = _checked_patches(patches, len(lengths))
    n_ranks = config.num_ranks
    max_degree = config.degree_limit
    capacity = cost.capacity_tokens
    mins = [min_degree_for(length, capacity) for length in lengths]
    for i, m in enumerate(mins):
        if m > max_degree:
            raise InfeasibleSampleError(i, lengths[i], capacity, max_degree)

    workloads = [cost.workload([length], None if patches is None else [patches[i]])
                 for i, length in enumerate(lengths)]
    timer = GroupTimer(cost, max_degree)
    facts = _sample_facts(lengths, patches, workloads, mins, timer, capacity, max_degree)
    lower_bound = step_lower_bound(cost, workloads, lengths, patches, timer, n_ranks,
                                   min_rounds(lengths, n_ranks, capacity))

    small = len(lengths) * n_ranks <= _SMALL_PROBLEM
    solver = RoundSolver(facts, timer, capacity, n_ranks, _THOROUGH if small else _FAST)
    best = _best_rounds(solver, facts, lengths, n_ranks, capacity, config.max_rounds,
                        extra_rounds=3 if small else 2, stop_when_worse=not small)

    rounds = tuple(_placed_round(choice, n_ranks, config.ranks_per_node) for choice in best)
    straddling = sum(r[1] for r in rounds)
    plan = Plan(
        rounds=tuple(r[0] for r in rounds),
        predicted_ms=float(sum(choice.makespan for choice in best)),
        lower_bound_ms=float(lower_bound),
        solver_ms=(time.perf_counter() - started) * 1e3,
        num_ranks=n_ranks,
        extras={"cross_node_groups": straddling, "cost_calls": timer.cost_calls},
    )
    logger.debug("planned %d samples on %d ranks: %d rounds, %.1f ms predicted, bound %.1f ms, %.2f ms solver",
                 len(lengths), n_ranks, plan.num_rounds, plan.predicted_ms, plan.lower_bound_ms, plan.solver_ms)
    return plan


def _best_rounds(
    solver: RoundSolver,
    facts: SampleFacts,
    lengths: list[int],
    n_ranks: int,
    capacity: int,
    max_rounds: int | None,
    extra_rounds: int,
    stop_when_worse: bool,
) -> list[RoundChoice]:
    """Solves the batch for several round counts and keeps the lowest total predicted time; with
    `stop_when_worse` the search ends at the first round count that does worse than the best so far."""
    best: tuple[float, list[RoundChoice]] | None = None
    tried = round_counts(lengths, n_ranks, capacity, max_rounds, extra_rounds)
    limit = min(len(lengths), max_rounds) if max_rounds is not None else len(lengths)
    min_samples = -(-n_ranks // solver.top_degree)
    round_tokens = n_ranks * capacity
    # Candidate anchors of `fill_rounds`: the longest samples by device time, ranked by their
    # shortest possible time.
    heavy = sorted(range(len(lengths)), key=lambda i: (-facts.device_ms[i], i))[: min(limit, tried[-1]) + 4]
    heavy_ms = {i: solver.best_ms(i) for i in heavy}
    anchors = sorted(heavy, key=lambda i: (-heavy_ms[i], i))
    count = tried[0]
    kinds = ["lpt", "fill"]
    while count <= limit and (count <= tried[-1] or best is None):
        results: dict[str, float] = {}
        lpt_spread = None
        for kind in kinds:
            if kind == "lpt":
                spread = spread_over_rounds(facts.device_ms, lengths, count, round_tokens, min_samples)
            elif count <= len(anchors):
                spread = fill_rounds(facts.device_ms, lengths, anchors[:count],
                                     [heavy_ms[i] for i in anchors[:count]], n_ranks, round_tokens, min_samples)
            else:
                spread = None
            if spread is None or (kind == "fill" and spread == lpt_spread):
                continue
            if kind == "lpt":
                lpt_spread = spread
            solved = [solver.solve(samples) for samples in spread]
            if all(r is not None for r in solved):
                results[kind] = sum(r.makespan for r in solved)
                if best is None or results[kind] < best[0]:
                    best = (results[kind], solved)
        if stop_when_worse and results:
            # Large batches: later round counts only use the spread that did best, and stop at the
            # first round count that does worse than the best so far.
            kinds = [min(results, key=results.get)]
            if min(results.values()) > best[0]:
                break
        count += 1
    if best is None:
        raise ValueError(
            f"no plan fits the batch in at most max_rounds={limit} rounds on {n_ranks} ranks "
            f"({capacity} tokens per rank)"
        )
    return best[1]


def _placed_round(choice: RoundChoice, n_ranks: int, ranks_per_node: int) -> tuple[RoundPlan, int]:
    placement = place_groups([g.degree for g in choice.groups], n_ranks, ranks_per_node)
    groups = sorted(
        (GroupPlan(tuple(range(start, start + g.degree)), g.degree, g.algo, g.samples, g.predicted_ms)
         for g, start in zip(choice.groups, placement.starts)),
        key=lambda g: g.ranks[0],
    )
    return RoundPlan(tuple(groups), choice.makespan), placement.straddling


def _sample_facts(
    lengths: list[int], patches: list[int] | None, workloads: list, mins: list[int], timer: GroupTimer,
    capacity: int, max_degree: int,
) -> SampleFacts:
    """Per-sample time at the minimum degree (and the device-time estimate built from it)."""
    at_min, _ = timer.evaluate(workloads, mins, max_degree, width=1)
    at_min = at_min[:, 0]
    device = at_min * np.array(mins, dtype=np.float64)
    for i in np.flatnonzero(~np.isfinite(at_min)):
        # No algo runs at the minimum degree (e.g. head divisibility): use the best allowed degree.
        window = timer.window(workloads[i], mins[i], max_degree) * np.arange(mins[i], max_degree + 1)
        if not np.isfinite(window).any():
            raise InfeasibleSampleError(int(i), lengths[i], capacity, max_degree)
        device[i] = float(np.min(window))
    one_rank = np.where(np.array(mins) == 1, at_min, np.inf)
    return SampleFacts(lengths, patches, workloads, device.tolist(), one_rank.tolist())


def _checked_lengths(lengths: Sequence[int]) -> list[int]:
    if len(lengths) == 0:
        raise ValueError("lengths is empty: a global batch needs at least one sample")
    out = []
    for i, length in enumerate(lengths):
        try:
            value = operator.index(length)
        except TypeError:
            raise ValueError(f"sample {i}: length must be an integer, got {length!r}") from None
        if isinstance(length, bool) or value <= 0:
            raise ValueError(f"sample {i}: length must be a positive integer, got {length!r}")
        out.append(int(value))
    return out


def _checked_patches(patches: Sequence[int] | None, count: int) -> list[int] | None:
    if patches is None:
        return None
    if len(patches) != count:
        raise ValueError(f"patches has {len(patches)} entries for {count} samples")
    out = []
    for i, value in enumerate(patches):
        try:
            number = operator.index(value)
        except TypeError:
            raise ValueError(f"sample {i}: patches must be an integer, got {value!r}") from None
        if isinstance(value, bool) or number < 0:
            raise ValueError(f"sample {i}: patches must be a non-negative integer, got {value!r}")
        out.append(int(number))
    return out
