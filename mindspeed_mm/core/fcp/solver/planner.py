"""`plan_batch`: the FCP planner for one global batch.

Feasibility checks, round formation, per round start groupings + stage 2 degree assignment + local
search (`round_layout`), node-aware placement, lower bound. Pure Python/numpy and deterministic: the
same inputs give the same plan and digest on every rank (every search budget is a count of moves).

Small problems get the thorough search: every start grouping, several round counts and spreads,
best-improvement local search. Larger ones get the lean one (`lean_search.lean_rounds`): uniform start
groupings of power-of-two group sizes, tried in the order of a cheap step estimate and skipped once
it cannot win (each size also with its long samples' own groups closed to the others, when those
hold much of the ranks), for the fewest rounds and then one more round at a time while that
does better; then a few single-sample moves out of each round's slowest group (a budget of moves), skipped when the
plan is already within `lean_search.GOOD_ENOUGH` of the lower bound, and stopped once the round's slowest
groups that the moves left could relieve are within `polish_min_gain` of the next one. The search
prices every group as if placed compactly; its starts are placed fastest first while a start's total
beats the fastest placed so far, and the fastest as placed is kept (`_fastest_placed`).

Under FSDP (lockstep rounds) with step figures in the cost model, round counts are compared with each
round counted at least its parameter traffic (`fsdp_round_ms`), the time it really takes. The plan is then
weighed against every static DP x CP layout of the batch (`static_alternatives`) and the faster kept: in
lockstep rounds, or, planned for replicas that meet only at the gradient reduction
(`SolverConfig.step_semantics` INDEPENDENT), run as independent replicas, each group waiting only for its
own members.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.errors import InfeasibleSampleError, NoAlgoForSampleError
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer, SampleWorkloads
from mindspeed_mm.core.fcp.solver.hybrid_split import with_hybrid_splits
from mindspeed_mm.core.fcp.solver.node_repair import aligned_degrees
from mindspeed_mm.core.fcp.solver.lower_bound import undominated_samples, work_bound
from mindspeed_mm.core.fcp.solver.static_alternatives import fastest_for_independent_groups, fastest_for_lockstep_rounds
from mindspeed_mm.core.fcp.solver.lean_search import lean_rounds
from mindspeed_mm.core.fcp.solver.placement import Placement, compact_node_part, placements
from mindspeed_mm.core.fcp.solver.plan import IDLE, INDEPENDENT, GroupPlan, Plan, RoundPlan, SolverConfig
from mindspeed_mm.core.fcp.solver.memory_checks import warn_if_state_sharded_wider
from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver
from mindspeed_mm.core.fcp.solver.round_types import GroupChoice, RoundChoice, RoundStart, SampleFacts, SearchLimits
from mindspeed_mm.core.fcp.solver.round_exchange import exchange_between_rounds
from mindspeed_mm.core.fcp.solver.round_polish import polish_round
from mindspeed_mm.core.fcp.solver.rounds import fill_rounds, min_rounds, no_plan, round_counts, round_limit, spread_over_rounds
from mindspeed_mm.core.fcp.solver.lengths import checked_counts
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, RoundFloor, round_floor
from mindspeed_mm.core.fcp.solver.vision_phases import priced_in_phases, vision_rank_ms

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel

logger = logging.getLogger(__name__)

# Problems up to this many samples x ranks get the thorough search (every move, many R values).
_SMALL_PROBLEM = 256
_THOROUGH = SearchLimits(uniform_degrees=(), bin_fractions=(1.0, 0.75, 0.5), packing_starts=True, max_moves=64,
                         max_evaluations=1 << 30, max_targets=1 << 30, max_movers=1 << 30, first_improvement=False)
# The polish stops once its steps left could save no more than 0.02% of a round: the degree split
# leaves most rounds balanced closer than that, and finer steps are far below the cost model's accuracy.
_LEAN = SearchLimits(uniform_degrees=(), bin_fractions=(), packing_starts=False, max_moves=3, max_evaluations=0,
                     max_targets=2, max_movers=3, first_improvement=True, polish_min_gain=2e-4)
# Thorough search: rounds re-solved at most by the moves of samples between rounds.
_EXCHANGE_BUDGET = 20


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
    length_arr = checked_counts(lengths, "length", 1)
    if patches is not None and len(patches) != len(length_arr):
        raise ValueError(f"patches has {len(patches)} entries for {len(length_arr)} samples")
    patch_arr = None if patches is None else checked_counts(patches, "patches", 0)
    patch_list = None if patch_arr is None else patch_arr.tolist()
    lengths = length_arr.tolist()
    n_ranks = config.num_ranks
    warn_if_state_sharded_wider(cost, n_ranks)
    max_degree = config.degree_limit
    capacity = cost.capacity_tokens
    mins = np.maximum(1, -(-length_arr // capacity))
    too_wide = np.flatnonzero(mins > max_degree)
    if too_wide.size:
        i = int(too_wide[0])
        raise InfeasibleSampleError(i, lengths[i], capacity, max_degree, n_ranks)

    # Lockstep rounds with vision work run the encoder and the decoder as two phases (`vision_phases`); with the
    # media spread over each round's ranks, the vision phase depends on the round's patches alone, so the rounds
    # are searched on the decoder work.
    phased = config.step_semantics == LOCKSTEP and patch_arr is not None and bool(patch_arr.any())
    search_patches = None if phased and config.vision_over_round else patch_arr
    workloads = SampleWorkloads(cost, length_arr, search_patches)
    timer = GroupTimer(cost, max_degree, config.degrees)
    facts = _sample_facts(lengths, workloads, mins, timer, capacity, max_degree)
    fewest_rounds = min_rounds(lengths, n_ranks, capacity)

    top = min(max_degree, n_ranks)
    thorough = config.thorough_search or len(lengths) * n_ranks <= _SMALL_PROBLEM
    if thorough:
        limits = replace(_THOROUGH, uniform_degrees=tuple(range(2, top + 1)))
    else:
        # Every power of two up to the top degree: with few samples per rank the best uniform groups can
        # span nodes (Ulysses 32 on image + video at 64 ranks); the step estimates skip the sizes that cannot win.
        sizes = tuple(1 << k for k in range(top.bit_length()))
        limits = replace(_LEAN, uniform_degrees=sizes)
    solver = RoundSolver(facts, timer, capacity, n_ranks, limits)
    # The lower bound (see `lower_bound`): the longest sample's best time from the memory-free times the
    # search uses too, and the work bound.
    longest = float(solver.alone_best_ms(undominated_samples(length_arr, patch_arr)).max())
    lower_bound = max(work_bound(cost, lengths, patch_list, n_ranks, fewest_rounds), longest)
    # Under FSDP a round lasts at least its parameter traffic: round counts are compared on that.
    floor = round_floor(cost, config.step_semantics)
    # Searched on the decoder work, rounds that spread their media over all their ranks each also pay one encoder
    # call's fixed cost (the call on one merge block): the search counts it per round.
    search_floor = replace(floor, per_round_ms=vision_rank_ms(cost, 1)) if search_patches is None and phased else floor

    def placed(choices: list[RoundChoice]) -> tuple[tuple[RoundPlan, int], ...]:
        if config.allow_idle_ranks:
            choices = [_with_idle_ranks(choice, cost, workloads) for choice in choices]
        return tuple(_placed_round(choice, n_ranks, config.ranks_per_node, cost, workloads, top) for choice in choices)

    if thorough:
        rounds = placed(_best_rounds(solver, facts, lengths, n_ranks, capacity, config.max_rounds, extra_rounds=3,
                                     floor=search_floor))
    else:
        found, moves = lean_rounds(solver, facts, lengths, n_ranks, capacity, config.max_rounds, lower_bound,
                                   search_floor)
        rounds = _fastest_placed(solver, found, moves, placed, search_floor)
    straddling = sum(r[1] for r in rounds)
    plan = Plan(
        rounds=tuple(r[0] for r in rounds),
        predicted_ms=float(sum(r[0].predicted_ms for r in rounds)),
        lower_bound_ms=float(lower_bound),
        solver_ms=0.0,
        num_ranks=n_ranks,
        extras={"cross_node_groups": straddling, "cost_calls": solver.cost_calls,
                "ranks_per_node": config.ranks_per_node},
    )
    if config.step_semantics == INDEPENDENT:
        plan = fastest_for_independent_groups(plan, length_arr, patch_list, cost, config)
    elif phased:
        # Priced as the encoder phase plus the decoder phase (`vision_phases`), the static layouts weighed so too.
        def in_phases(candidate: Plan) -> Plan:
            return priced_in_phases(candidate, length_arr, patch_arr, cost, config.ranks_per_node,
                                    config.vision_over_round)

        plan = in_phases(plan)
        if not config.allow_idle_ranks:
            plan = fastest_for_lockstep_rounds(plan, length_arr, patch_list, cost, config, floor, reprice=in_phases)
    elif not config.allow_idle_ranks:
        plan = fastest_for_lockstep_rounds(plan, length_arr, patch_list, cost, config, floor)
    plan = with_hybrid_splits(plan, lengths, cost)
    plan = replace(plan, solver_ms=(time.perf_counter() - started) * 1e3)
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
    floor: RoundFloor = RoundFloor(),
) -> list[RoundChoice]:
    """Thorough search: solves the batch for several round counts, each with the LPT spread and the
    fill spread, and keeps the lowest total predicted time (each round counted as `floor` lengthens it)."""
    best: tuple[float, list[RoundChoice]] | None = None
    tried = round_counts(lengths, n_ranks, capacity, max_rounds, extra_rounds)
    limit = round_limit(lengths, max_rounds)
    min_samples = -(-n_ranks // solver.top_degree)
    round_tokens = n_ranks * capacity
    # Candidate anchors of `fill_rounds`: the longest samples by device time, ranked by their
    # shortest possible time.
    heavy = sorted(range(len(lengths)), key=lambda i: (-facts.device_ms[i], i))[: min(limit, tried[-1]) + 4]
    heavy_ms = {i: solver.best_ms(i) for i in heavy}
    anchors = sorted(heavy, key=lambda i: (-heavy_ms[i], i))
    count = tried[0]
    while count <= limit and (count <= tried[-1] or best is None):
        lpt_spread = spread_over_rounds(facts.device_ms, lengths, count, round_tokens, min_samples)
        fill_spread = None
        if count <= len(anchors):
            fill_spread = fill_rounds(facts.device_ms, lengths, anchors[:count],
                                      [heavy_ms[i] for i in anchors[:count]], n_ranks, round_tokens, min_samples)
        for spread in (lpt_spread, None if fill_spread == lpt_spread else fill_spread):
            if spread is None:
                continue
            solved = [solver.solve(samples) for samples in spread]
            if all(r is not None for r in solved):
                total = sum(floor.round_ms(r.makespan) for r in solved)
                if best is None or total < best[0]:
                    best = (total, solved)
        count += 1
    if best is None:
        raise no_plan(solver, lengths, n_ranks, capacity, max_rounds)
    return exchange_between_rounds(solver, best[1], _EXCHANGE_BUDGET)


def _fastest_placed(
    solver: RoundSolver,
    found: list[tuple[float, list[RoundStart]]],
    moves: int,
    placed: Callable[[list[RoundChoice]], tuple[tuple[RoundPlan, int], ...]],
    floor: RoundFloor,
) -> tuple[tuple[RoundPlan, int], ...]:
    """The (total, starts) found, fastest first, each polished and placed while its search total beats
    the fastest placed so far, and the fastest placed. The search prices every group as if placed
    compactly; a group that lands across a node boundary only ever costs more (the polish rarely
    gains much), so the next start can only win when placement cost the ones before it more than
    their lead. Usually the first is placed alone."""
    best: tuple[tuple[RoundPlan, int], ...] | None = None
    best_total = float("inf")
    for total, starts in found:
        if best is not None and not total < best_total:
            break
        rounds = placed([polish_round(solver, start, moves) for start in starts])
        placed_total = sum(floor.round_ms(r[0].predicted_ms) for r in rounds)
        if placed_total < best_total:
            best, best_total = rounds, placed_total
    assert best is not None
    return best


def _placed_round(choice: RoundChoice, n_ranks: int, ranks_per_node: int, cost: "CostModel",
                  workloads: SampleWorkloads, top_degree: int) -> tuple[RoundPlan, int]:
    """The round on contiguous rank ranges. A group placed across more nodes than the search assumed
    is re-priced (its algo re-chosen) where it landed; the same groups on node-aligned degrees
    (`node_repair`) replace the round when they are faster as placed."""
    groups = [(g.degree, g.algo, g.samples, g.predicted_ms) for g in choice.groups]
    placed = _priced(groups, n_ranks, ranks_per_node, cost, workloads)
    if placed[1] == 0 or any(g.algo == IDLE for g in choice.groups):
        return placed
    group_workloads, tokens = workloads.groups([g.samples for g in choice.groups])
    mins = [cost.min_degree(t) for t in tokens.tolist()]
    aligned = aligned_degrees(cost, group_workloads, mins, n_ranks, top_degree, ranks_per_node)
    if aligned is not None:
        other = _priced([(d, a, g.samples, t) for d, t, a, g in zip(*aligned, choice.groups)], n_ranks,
                        ranks_per_node, cost, workloads)
        if other[0].predicted_ms < placed[0].predicted_ms:
            return other
    return placed


def _with_idle_ranks(choice: RoundChoice, cost: "CostModel", workloads: SampleWorkloads) -> RoundChoice:
    """Each group on the degree, up to the ranks it was given, where it runs fastest; the ranks it
    then leaves sit the round out as 1-rank idle groups."""
    kept: list[GroupChoice] = []
    idle = 0
    group_workloads, tokens = workloads.each_group([g.samples for g in choice.groups])
    for g, workload, held in zip(choice.groups, group_workloads, tokens):
        first = cost.min_degree(held)
        if g.degree <= first:
            kept.append(g)
            continue
        times, index = cost.best_time_ms(workload, np.arange(first, g.degree + 1))
        k = int(np.argmin(times))
        if not times[k] < g.predicted_ms * (1 - 1e-9):
            kept.append(g)
            continue
        kept.append(GroupChoice(g.samples, first + k, cost.algos[int(index[k])], float(times[k])))
        idle += g.degree - first - k
    if not idle:
        return choice
    kept.extend(GroupChoice((), 1, IDLE, 0.0) for _ in range(idle))
    return RoundChoice(tuple(kept), max(g.predicted_ms for g in kept))


def _priced(groups: list[tuple[int, str, tuple[int, ...], float]], n_ranks: int, ranks_per_node: int,
            cost: "CostModel", workloads: SampleWorkloads) -> tuple[RoundPlan, int]:
    """(degree, algo, samples, time) groups placed, each priced where it landed; and the count of
    groups that fit a node but cross a node boundary. When some must cross, they are chosen both
    ways (`placements`: the smallest, the fastest) and the faster round is kept (ties: the smallest)."""
    laid_out = placements([g[0] for g in groups], n_ranks, ranks_per_node, [g[3] for g in groups])
    priced = [_priced_at(placement, groups, ranks_per_node, cost, workloads) for placement in laid_out]
    return min(priced, key=lambda round_and_count: round_and_count[0].predicted_ms)


def _priced_at(placement: Placement, groups: list[tuple[int, str, tuple[int, ...], float]], ranks_per_node: int,
               cost: "CostModel", workloads: SampleWorkloads) -> tuple[RoundPlan, int]:
    """The groups on `placement`, each priced where it landed, and the count of those that cross a node boundary."""
    moved = [k for k, (degree, algo, _, _) in enumerate(groups)
             if algo != IDLE and placement.node_parts[k] != compact_node_part(degree, ranks_per_node)]
    repriced: dict[int, tuple[float, str]] = {}
    if moved:
        times, algos = cost.best_placed_time_table(workloads.groups([groups[k][2] for k in moved])[0],
                                                   [groups[k][0] for k in moved],
                                                   [placement.node_parts[k] for k in moved])
        repriced = dict(zip(moved, zip(times.tolist(), algos)))
    out = []
    for start, k in sorted(zip(placement.starts, range(len(groups)))):  # by first rank
        degree, algo, samples, predicted = groups[k]
        if k in repriced:
            predicted, algo = repriced[k]
        out.append(GroupPlan(tuple(range(start, start + degree)), degree, algo, samples, predicted))
    return RoundPlan(tuple(out), max(g.predicted_ms for g in out)), placement.straddling


def _sample_facts(
    lengths: list[int], workloads: SampleWorkloads, mins: np.ndarray, timer: GroupTimer, capacity: int,
    max_degree: int,
) -> SampleFacts:
    """Per-sample time at the minimum degree (and the device-time estimate built from it)."""
    at_min, _ = timer.evaluate(workloads.every_sample(), mins, max_degree, width=1)
    at_min = at_min[:, 0]
    device = at_min * mins
    for i in np.flatnonzero(~np.isfinite(at_min)).tolist():
        # No algo runs at the minimum degree (e.g. head divisibility): use the best allowed degree.
        first = int(mins[i])
        window = timer.window(workloads[i], first, max_degree) * np.arange(first, max_degree + 1)
        if not np.isfinite(window).any():
            raise NoAlgoForSampleError(i, lengths[i], capacity, max_degree, first, tuple(timer.cost.algos))
        device[i] = float(np.min(window))
    one_rank = np.where(mins == 1, at_min, np.inf)
    return SampleFacts(lengths, workloads, mins.tolist(), device.tolist(), one_rank.tolist())
