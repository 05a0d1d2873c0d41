"""FCP's rounds weighed against the static layouts of the same batch, so that a plan is never slower than
the best homogeneous DP x CP layout it could have chosen:

- in lockstep rounds (FSDP): the static layout's micro-batches in rounds of one per replica
  (`static_layout.lockstep_rounds`), each round counted as the planner counts its own (`RoundFloor`);
- for groups that meet only at the step's gradient reduction (DDP, `fcp train`): a static layout run as
  independent replicas, whichever finishes first when every group waits only for its own members, its
  micro-batches packed both by the shared packer and for the replicas' real loads (`replica_balance`).

A layout is skipped, without packing its micro-batches, when it cannot win: its replicas' work is at least
the whole batch's time on one group of its degree and algo (memory ignored; a group's time is subadditive
in its samples) shared by the replicas, and at least its slowest sample's time alone. Layouts are tried
in the order of that bound."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.baseline_common import BaselineInfeasibleError
from mindspeed_mm.core.fcp.solver.placement import compact_node_part, placed_node_part
from mindspeed_mm.core.fcp.solver.plan import IDLE, Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.replica_balance import marginal_packing, rebalanced
from mindspeed_mm.core.fcp.solver.static_layout import (
    StaticPacker,
    StaticPacks,
    blocks_are_compact,
    busiest_replica_ms,
    dealt_to_replicas,
    independent_rounds,
    lockstep_rounds,
    static_degrees,
)
from mindspeed_mm.core.fcp.solver.step_time import RoundFloor, dataflow_ms


def _layouts_by_bound(packer: StaticPacker, lengths: np.ndarray, cost: CostModel,
                      config: SolverConfig) -> list[tuple[float, int, str]]:
    """(bound, degree, algo) of every static layout, the lowest bound first."""
    layouts = []
    for algo in cost.algos:
        degrees = static_degrees(int(lengths.max()), cost, config, algo)
        if degrees:
            whole_ms = packer.whole_batch_ms(degrees, algo).tolist()
            layouts.extend((ms * d / config.num_ranks, d, algo) for d, ms in zip(degrees, whole_ms))
    return sorted(layouts)


def _straddling(rounds: list, node: int) -> int:
    return sum(1 for r in rounds for g in r.groups if g.algo != IDLE and g.degree <= node
               and placed_node_part(g.ranks[0], g.degree, node) != compact_node_part(g.degree, node))


def fastest_for_lockstep_rounds(plan: Plan, lengths: np.ndarray, patches: list[int] | None, cost: CostModel,
                                config: SolverConfig, floor: RoundFloor,
                                reprice: Callable[[Plan], Plan] | None = None) -> Plan:
    """`plan`, or the static layout in lockstep rounds whose rounds, each counted by `floor`, take less time.
    `reprice`: how a layout's plan is priced (`vision_phases.priced_in_phases`), never below the group times the
    layouts are packed and skipped by."""
    def total(rounds) -> float:
        return sum(floor.round_ms(r.predicted_ms) for r in rounds)

    best, best_ms = plan, total(plan.rounds) if plan.rounds else math.inf   # no rounds: any layout wins
    node, n_ranks = config.ranks_per_node, config.num_ranks
    packer = StaticPacker(lengths, patches, cost)
    for bound, degree, algo in _layouts_by_bound(packer, lengths, cost, config):
        if not bound < best_ms:
            break
        alone_ms = packer.alone_ms(degree, algo)
        if not alone_ms.max() < best_ms:
            continue
        replicas = n_ranks // degree
        try:
            packs = packer.packs(degree, algo, replicas, alone_ms)
        except BaselineInfeasibleError:
            continue
        if blocks_are_compact(degree, replicas, node):
            # Every group costs its pack's time: the rounds' total from the sorted pack times alone (the
            # rounds are built only for a layout that wins).
            slowest_first = sorted(packs.pack_ms, reverse=True)
            if not sum(floor.round_ms(ms) for ms in slowest_first[::replicas]) < best_ms:
                continue
        rounds = lockstep_rounds(packs, replicas, lengths, patches, cost, node)
        candidate = replace(plan, rounds=tuple(rounds), predicted_ms=float(sum(r.predicted_ms for r in rounds)),
                            extras={**plan.extras, "cross_node_groups": _straddling(rounds, node),
                                    "static_layout": {"cp_degree": degree, "algo": algo}})
        if reprice is not None:
            candidate = reprice(candidate)
        candidate_ms = total(candidate.rounds)
        if candidate_ms < best_ms:
            best, best_ms = candidate, candidate_ms
    return best


def fastest_for_independent_groups(plan: Plan, lengths: np.ndarray, patches: list[int] | None,
                                   cost: CostModel, config: SolverConfig) -> Plan:
    """`plan`, or the static layout run as independent replicas (`static_layout.independent_rounds`)
    that finishes first when each group waits only for its own members (`dataflow_ms`): with one
    reduction per step, replicas that never wait for each other can beat rounds balanced in lockstep."""
    best, best_ms = plan, dataflow_ms(plan) if plan.rounds else math.inf
    node, n_ranks = config.ranks_per_node, config.num_ranks
    packer = StaticPacker(lengths, patches, cost)
    balanced: dict[tuple[int, bytes], tuple[StaticPacks, list[list[int]]]] = {}
    for bound, degree, algo in _layouts_by_bound(packer, lengths, cost, config):
        if not bound < best_ms:
            break
        replicas = n_ranks // degree
        alone_ms = packer.alone_ms(degree, algo)
        if not alone_ms.max() < best_ms:
            continue
        packings = []
        try:
            packs = packer.packs(degree, algo, replicas, alone_ms)
            packings.append((packs, dealt_to_replicas(packs, replicas)))
        except BaselineInfeasibleError:
            pass
        # Packed for the replicas' real loads (`replica_balance`): micro-batches priced as they grow (once for
        # layouts whose samples cost the same: ring and Ulysses on one rank).
        key = (degree, alone_ms.tobytes())
        if key not in balanced:
            balanced[key] = rebalanced(*marginal_packing(packer.columns, lengths, cost, degree, algo, replicas),
                                       packer.columns, lengths, cost)
        packs, dealt = balanced[key]
        packings.append((replace(packs, algo=algo), dealt))
        for packs, dealt in packings:
            busiest = busiest_replica_ms(packs, dealt, node)
            if busiest is not None and not busiest < best_ms:
                continue
            rounds = independent_rounds(packs, replicas, lengths, patches, cost, node, dealt)
            candidate = replace(plan, rounds=tuple(rounds), predicted_ms=float(sum(r.predicted_ms for r in rounds)),
                                extras={**plan.extras, "cross_node_groups": _straddling(rounds, node),
                                        "independent_replicas": {"cp_degree": degree, "algo": algo}})
            candidate_ms = dataflow_ms(candidate)
            if candidate_ms < best_ms:
                best, best_ms = candidate, candidate_ms
    return best
