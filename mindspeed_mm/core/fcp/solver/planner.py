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

Groups come from the run's catalogue (`communicators`): within the communicator budget every rank may join,
the search uses the catalogue's degrees and rounds are placed on its aligned slot grid; a round whose degrees do not
fit the grid is placed, where faster, with its groups on powers of two or with its samples searched again on the
catalogue's powers of two (they always pack); a batch none of whose layouts fits is searched again on them, and the
static layouts of catalogue groups are the last resort. Where every contiguous range fits the budget (small planes)
placement is free, as without a budget.

Under FSDP (lockstep rounds) with step figures in the cost model, round counts are compared with each
round counted at least its parameter traffic (`fsdp_round_ms`), the time it really takes. The plan is then
weighed against every static DP x CP layout of the batch (`static_alternatives`) and the faster kept: in
lockstep rounds, or, planned for replicas that meet only at the gradient reduction
(`SolverConfig.step_semantics` INDEPENDENT), run as independent replicas, each group waiting only for its
own members.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.errors import (
    CommunicatorBudgetError, InfeasibleSampleError, NoAlgoForSampleError, NoLayoutInBudgetError,
)
from mindspeed_mm.core.fcp.solver.expert_phases import expert_parallel_size, priced_with_expert_exchange
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer, SampleWorkloads
from mindspeed_mm.core.fcp.solver.communicators import GroupCatalogue
from mindspeed_mm.core.fcp.solver.hybrid_split import with_hybrid_splits
from mindspeed_mm.core.fcp.solver.node_repair import aligned_degrees, power_of_two_degrees
from mindspeed_mm.core.fcp.solver.lower_bound import undominated_samples, work_bound
from mindspeed_mm.core.fcp.solver.static_alternatives import fastest_for_independent_groups, fastest_for_lockstep_rounds
from mindspeed_mm.core.fcp.solver.lean_search import lean_rounds
from mindspeed_mm.core.fcp.solver.placement import (
    Placement, compact_node_part, placements, slot_grid_placement,
)
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
    ValueError on an empty batch or a bad length / patch count (naming the sample index),
    `InfeasibleSampleError` when a sample needs more ranks than `config.max_degree` allows (a
    `CommunicatorBudgetError` when the budget's groups are narrower than that), and `NoLayoutInBudgetError`
    when no layout of the batch fits the budget's groups (only where no static layout of them holds the longest
    sample: a largest degree that is not a power of two).
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
    # The groups plans may use within the communicator budget (`communicators`): their degrees bound the search.
    catalogue = config.catalogue(cost.algos, cost.hybrid_rule.block)
    if catalogue.budget is not None:
        cost = cost.with_hybrid_degrees(frozenset(catalogue.hybrid_degrees))   # hybrid where the catalogue has rings
    max_degree = min(config.degree_limit, catalogue.top_degree)
    capacity = cost.capacity_tokens
    mins = np.maximum(1, -(-length_arr // capacity))
    too_wide = np.flatnonzero(mins > max_degree)
    if too_wide.size:
        i = int(too_wide[0])
        if max_degree < config.degree_limit and mins[i] <= config.degree_limit:
            raise CommunicatorBudgetError(i, lengths[i], capacity, catalogue)
        raise InfeasibleSampleError(i, lengths[i], capacity, max_degree, n_ranks)
    degrees = _allowed_degrees(config.degrees, catalogue.search_degrees)
    # The degrees rounds are searched again on where they do not fit the grid: the powers of two (they always pack),
    # and, where the longest sample needs more (a largest degree that is not a power of two), the fewest that hold it.
    chain = catalogue.chain
    if not catalogue.contiguous and int(mins.max()) > chain[-1]:
        chain += (min(d for d in catalogue.degrees if d >= int(mins.max())),)  # type: ignore[union-attr]
    chain = _allowed_degrees(config.degrees, chain)

    # Lockstep rounds with vision work run the encoder and the decoder as two phases (`vision_phases`); with the
    # media spread over each round's ranks, the vision phase depends on the round's patches alone, so the rounds
    # are searched on the decoder work.
    phased = config.step_semantics == LOCKSTEP and patch_arr is not None and bool(patch_arr.any())
    search_patches = None if phased and config.vision_over_round else patch_arr
    workloads = SampleWorkloads(cost, length_arr, search_patches)
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
    timer = GroupTimer(cost, max_degree, degrees)
    facts = _sample_facts(lengths, workloads, mins, timer, capacity, max_degree)
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

    def round_solver(search_degrees: tuple[int, ...] | None) -> RoundSolver:
        search_timer = GroupTimer(cost, max_degree, search_degrees)
        search_facts = _sample_facts(lengths, workloads, mins, search_timer, capacity, max_degree)
        return RoundSolver(search_facts, search_timer, capacity, n_ranks, limits)

    placer = _RoundPlacer(cost, workloads, n_ranks, config.ranks_per_node, top, catalogue)
    # Rounds whose groups do not fit the slot grid are searched again on its power-of-two chain, which always packs
    # (the search and its facts are only built for the first such round).
    placer.chain_solver = lambda: round_solver(chain)

    def searched(round_search: RoundSolver, search_degrees: tuple[int, ...] | None
                 ) -> tuple[tuple[RoundPlan, int], ...] | None:
        def placed(choices: list[RoundChoice]) -> tuple[tuple[RoundPlan, int], ...] | None:
            if config.allow_idle_ranks:
                choices = [_with_idle_ranks(choice, cost, workloads, search_degrees) for choice in choices]
            rounds = tuple(placer.place(choice) for choice in choices)
            return None if any(r is None for r in rounds) else rounds  # type: ignore[return-value]

        if thorough:
            # The layouts found, fastest first: the first whose rounds all fit the catalogue (usually the first).
            for solved in _solved_rounds(round_search, round_search.facts, lengths, n_ranks, capacity,
                                         config.max_rounds, extra_rounds=3, floor=search_floor):
                rounds = placed(exchange_between_rounds(round_search, solved, _EXCHANGE_BUDGET))
                if rounds is not None:
                    return rounds
            return None
        found, moves = lean_rounds(round_search, round_search.facts, lengths, n_ranks, capacity, config.max_rounds,
                                   lower_bound, search_floor)
        return _fastest_placed(round_search, found, moves, placed, search_floor)

    rounds = searched(solver, degrees)
    if rounds is None and not catalogue.contiguous:
        # Some round of every layout found fits the slot grid in no way: the whole batch searched on the chain, whose
        # rounds the search may compose differently.
        rounds = searched(placer.chain(), chain)
    if rounds is None:
        # Still none: the static layouts made of catalogue groups below are the plan.
        logger.warning("FCP planner: no searched layout of %d samples fits the %s; planning a static layout",
                       len(lengths), catalogue.describe())
        rounds = ()
    straddling = sum(r[1] for r in rounds)
    plan = Plan(
        rounds=tuple(r[0] for r in rounds),
        predicted_ms=float(sum(r[0].predicted_ms for r in rounds)) if rounds else math.inf,
        lower_bound_ms=float(lower_bound),
        solver_ms=0.0,
        num_ranks=n_ranks,
        extras={"cross_node_groups": straddling, "cost_calls": solver.cost_calls,
                "ranks_per_node": config.ranks_per_node},
    )
    # The static layouts weighed against the plan: those made of catalogue groups.
    static_config = replace(config, degrees=_allowed_degrees(config.degrees, catalogue.static_degrees()))
    if config.step_semantics == INDEPENDENT:
        plan = fastest_for_independent_groups(plan, length_arr, patch_list, cost, static_config)
    else:
        # Priced as the encoder phase plus the decoder phase (`vision_phases`) and with expert parallelism as its
        # blocks run each round (`expert_phases`), the static layouts weighed so too.
        coupled = expert_parallel_size(cost) > 1

        def reprice(candidate: Plan) -> Plan:
            if phased:
                candidate = priced_in_phases(candidate, length_arr, patch_arr, cost, config.ranks_per_node,
                                             config.vision_over_round)
            return priced_with_expert_exchange(candidate, length_arr, cost) if coupled else candidate

        if phased or coupled:
            plan = reprice(plan) if plan.rounds else plan
            if not config.allow_idle_ranks:
                plan = fastest_for_lockstep_rounds(plan, length_arr, patch_list, cost, static_config, floor,
                                                   reprice=reprice)
        elif not config.allow_idle_ranks:
            plan = fastest_for_lockstep_rounds(plan, length_arr, patch_list, cost, static_config, floor)
    if not plan.rounds:
        if max(catalogue.static_degrees()) < int(mins.max()):
            raise NoLayoutInBudgetError(len(lengths), int(mins.max()), catalogue)
        raise no_plan(solver, lengths, n_ranks, capacity, config.max_rounds)
    plan = with_hybrid_splits(plan, lengths, cost)
    plan = replace(plan, solver_ms=(time.perf_counter() - started) * 1e3)
    logger.debug("planned %d samples on %d ranks: %d rounds, %.1f ms predicted, bound %.1f ms, %.2f ms solver",
                 len(lengths), n_ranks, plan.num_rounds, plan.predicted_ms, plan.lower_bound_ms, plan.solver_ms)
    return plan


def _solved_rounds(
    solver: RoundSolver,
    facts: SampleFacts,
    lengths: list[int],
    n_ranks: int,
    capacity: int,
    max_rounds: int | None,
    extra_rounds: int,
    floor: RoundFloor = RoundFloor(),
) -> list[list[RoundChoice]]:
    """Thorough search: solves the batch for several round counts, each with the LPT spread and the
    fill spread; the rounds of each, the lowest total predicted time first (each round counted as `floor`
    lengthens it; ties: the first found); none when no round count has a solution (the planner falls back)."""
    found: list[tuple[float, int, list[RoundChoice]]] = []
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
    while count <= limit and (count <= tried[-1] or not found):
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
                found.append((total, len(found), solved))
        count += 1
    return [solved for _, _, solved in sorted(found, key=lambda entry: entry[:2])]


def _fastest_placed(
    solver: RoundSolver,
    found: list[tuple[float, list[RoundStart]]],
    moves: int,
    placed: Callable[[list[RoundChoice]], tuple[tuple[RoundPlan, int], ...] | None],
    floor: RoundFloor,
) -> tuple[tuple[RoundPlan, int], ...] | None:
    """The (total, starts) found, fastest first, each polished and placed while its search total beats
    the fastest placed so far, and the fastest placed. The search prices every group as if placed
    compactly; a group that lands across a node boundary only ever costs more (the polish rarely
    gains much), so the next start can only win when placement cost the ones before it more than
    their lead. Usually the first is placed alone. None when no start could be placed in the catalogue."""
    best: tuple[tuple[RoundPlan, int], ...] | None = None
    best_total = float("inf")
    for total, starts in found:
        if best is not None and not total < best_total:
            break
        rounds = placed([polish_round(solver, start, moves) for start in starts])
        if rounds is None:
            continue
        placed_total = sum(floor.round_ms(r[0].predicted_ms) for r in rounds)
        if placed_total < best_total:
            best, best_total = rounds, placed_total
    return best


def _allowed_degrees(asked: tuple[int, ...] | None, allowed: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The degrees both allow (None: any)."""
    if asked is None or allowed is None:
        return allowed if asked is None else asked
    return tuple(sorted(set(asked) & set(allowed)))


class _RoundPlacer:
    """Places the rounds the search chose on ranks, within the run's catalogue of groups."""

    def __init__(self, cost: "CostModel", workloads: SampleWorkloads, n_ranks: int, ranks_per_node: int,
                 top_degree: int, catalogue: GroupCatalogue) -> None:
        self.cost = cost
        self.workloads = workloads
        self.n_ranks = n_ranks
        self.ranks_per_node = ranks_per_node
        self.top_degree = top_degree
        self.catalogue = catalogue
        self.chain_solver: Callable[[], RoundSolver] | None = None
        """Builds the search on the catalogue's power-of-two chain (re-searches rounds that do not fit the grid)."""
        self._chain: RoundSolver | None = None

    def place(self, choice: RoundChoice) -> tuple[RoundPlan, int] | None:
        """The round on ranks and its count of groups across a node boundary; None where it fits no layout of the
        catalogue."""
        if self.catalogue.contiguous:
            return self._contiguous(choice)
        return self._on_grid(choice)

    def _contiguous(self, choice: RoundChoice) -> tuple[RoundPlan, int]:
        """The round on contiguous rank ranges. A group placed across more nodes than the search assumed is re-priced
        (its algo re-chosen) where it landed; the same groups on node-aligned degrees (`node_repair`) replace the
        round when they are faster as placed."""
        groups = [(g.degree, g.algo, g.samples, g.predicted_ms) for g in choice.groups]
        placed = _priced(groups, self.n_ranks, self.ranks_per_node, self.cost, self.workloads)
        if placed[1] == 0 or any(g.algo == IDLE for g in choice.groups):
            return placed
        group_workloads, mins = self._mins(choice)
        aligned = aligned_degrees(self.cost, group_workloads, mins, self.n_ranks, self.top_degree,
                                  self.ranks_per_node)
        if aligned is not None:
            other = _priced([(d, a, g.samples, t) for d, t, a, g in zip(*aligned, choice.groups)], self.n_ranks,
                            self.ranks_per_node, self.cost, self.workloads)
            if other[0].predicted_ms < placed[0].predicted_ms:
                return other
        return placed

    def _on_grid(self, choice: RoundChoice) -> tuple[RoundPlan, int] | None:
        """The round on the slot grid. Where its degrees do not fit the grid, or a group lands across a node
        boundary (a node size that is not a power of two), the same groups on powers of two and, where the grid
        failed, the round's samples searched again on the power-of-two chain are placed too; the fastest is kept."""
        groups = [(g.degree, g.algo, g.samples, g.predicted_ms) for g in choice.groups]
        options = []
        placement = slot_grid_placement([g[0] for g in groups], self.n_ranks, self.ranks_per_node)
        if placement is not None:
            options.append(_priced_at(placement, groups, self.ranks_per_node, self.cost, self.workloads))
            if options[0][1] == 0:
                return options[0]
        chain_top = self.catalogue.chain[-1]
        if not any(g.algo == IDLE for g in choice.groups):
            group_workloads, mins = self._mins(choice)
            aligned = power_of_two_degrees(self.cost, group_workloads, mins, self.n_ranks,
                                           min(self.top_degree, chain_top))
            if aligned is not None:
                options.append(self._grid_priced([(d, a, g.samples, t)
                                                  for d, t, a, g in zip(*aligned, choice.groups)]))
        if placement is None and self.chain_solver is not None:
            again = self._searched_on_chain(choice)
            if again is not None:
                options.append(self._grid_priced([(g.degree, g.algo, g.samples, g.predicted_ms)
                                                  for g in again.groups]))
        options = [option for option in options if option is not None]
        return min(options, key=lambda round_and_count: round_and_count[0].predicted_ms) if options else None

    def _searched_on_chain(self, choice: RoundChoice) -> RoundChoice | None:
        """The round's samples searched again on the chain: uniform groups of the powers of two around the round's
        degrees first (at 1,024 ranks a search over every power of two costs more than the rest of the plan), every
        power of two where none of those fits."""
        chain = self.chain()
        samples = sorted(i for g in choice.groups for i in g.samples)
        used = [g.degree for g in choice.groups if g.samples]
        low, high = 1 << (min(used).bit_length() - 1), 1 << (max(used) - 1).bit_length()
        near = tuple(d for d in chain.limits.uniform_degrees if low <= d <= high)
        start = chain.start(samples, near) if near else None
        if start is None:
            return chain.solve(samples)
        return chain.finish(start)

    def chain(self) -> RoundSolver:
        """The search on the catalogue's power-of-two chain (built once)."""
        if self._chain is None:
            assert self.chain_solver is not None
            self._chain = self.chain_solver()
        return self._chain

    def _grid_priced(self, groups: list[tuple[int, str, tuple[int, ...], float]]) -> tuple[RoundPlan, int] | None:
        placement = slot_grid_placement([g[0] for g in groups], self.n_ranks, self.ranks_per_node)
        return None if placement is None else _priced_at(placement, groups, self.ranks_per_node, self.cost,
                                                          self.workloads)

    def _mins(self, choice: RoundChoice) -> tuple[object, list[int]]:
        """The workloads of the round's groups and the fewest ranks each needs."""
        group_workloads, tokens = self.workloads.groups([g.samples for g in choice.groups])
        return group_workloads, [self.cost.min_degree(t) for t in tokens.tolist()]


def _with_idle_ranks(choice: RoundChoice, cost: "CostModel", workloads: SampleWorkloads,
                     degrees: tuple[int, ...] | None) -> RoundChoice:
    """Each group on the degree (of `degrees`; None: any), up to the ranks it was given, where it runs fastest; the
    ranks it then leaves sit the round out as 1-rank idle groups."""
    kept: list[GroupChoice] = []
    idle = 0
    group_workloads, tokens = workloads.each_group([g.samples for g in choice.groups])
    for g, workload, held in zip(choice.groups, group_workloads, tokens):
        first = cost.min_degree(held)
        if g.degree <= first:
            kept.append(g)
            continue
        candidates = np.arange(first, g.degree + 1)
        if degrees is not None:
            candidates = candidates[np.isin(candidates, degrees)]
        if not candidates.size:
            kept.append(g)
            continue
        times, index = cost.best_time_ms(workload, candidates)
        k = int(np.argmin(times))
        if not times[k] < g.predicted_ms * (1 - 1e-9):
            kept.append(g)
            continue
        kept.append(GroupChoice(g.samples, int(candidates[k]), cost.algos[int(index[k])], float(times[k])))
        idle += g.degree - int(candidates[k])
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
    elsewhere = np.flatnonzero(~np.isfinite(at_min)).tolist()
    # No algo runs at the minimum degree (head divisibility, a degree outside the catalogue): the best allowed
    # degree up to twice the minimum (where the catalogue's powers of two always have one; a rank's share of the
    # work only grows beyond), every such sample's degrees queried in one batch.
    timer.prepare([(workloads[i], int(mins[i]), min(max_degree, 2 * int(mins[i]))) for i in elsewhere])
    for i in elsewhere:
        first = int(mins[i])
        top = min(max_degree, 2 * first)
        window = timer.window(workloads[i], first, top) * np.arange(first, top + 1)
        if not np.isfinite(window).any():
            window = timer.window(workloads[i], first, max_degree) * np.arange(first, max_degree + 1)
        if not np.isfinite(window).any():
            raise NoAlgoForSampleError(i, lengths[i], capacity, max_degree, first, tuple(timer.cost.algos))
        device[i] = float(np.min(window))
    one_rank = np.where(mins == 1, at_min, np.inf)
    return SampleFacts(lengths, workloads, mins.tolist(), device.tolist(), one_rank.tolist())
