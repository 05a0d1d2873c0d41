"""Rounds of a mixture-of-experts model with expert parallelism: every layer's all-to-alls couple the groups of a
round, so a round moves at the pace of its slowest rank in each layer.

With expert parallelism of size ep (a cost model whose table has `expert_parallel` > 1), MindSpeed-MM splits the
experts over blocks of ep contiguous ranks (its [ep_replicate, ep] device mesh) whatever FCP's groups are. In every
layer, forward and backward, each rank of a block sends the routed copies of its tokens to the ranks holding their
experts (dispatch), those ranks compute them, and the results come back (combine): two all-to-alls over the block,
which wait for its slowest rank. Per layer a block therefore lasts

    the slowest of its ranks' work before the dispatch (attention, projections, its group's exchanges)
    + the experts' work on the routed copies of the block's tokens, which uniform routing spreads evenly over the
      block: each rank computes the copies of the block's mean tokens per rank
    + the all-to-alls, paced by the rank holding the most tokens (it sends the most, `expert_terms`),

and since every layer of a group repeats the same work, a round lasts, over all layers, the slowest block of

    max over its ranks of A_r + experts(mean tokens of the block) + exchange(most tokens of a rank of the block)

where A_r is the time of the group of rank r priced alone without its own experts' work and exchange (the vision
phase included where the round is priced in phases). FSDP's per-layer all-gathers span every rank too, but each is
issued a layer ahead (prefetch): they bound how far blocks drift apart, the all-to-alls fix each block's pace.

A group priced alone (`CostModel.group_time_ms`: what the planner's search compares) pays its experts and its
exchange on its own tokens; `priced_with_expert_exchange` re-prices a plan's rounds so, and the planner, the
static layouts it is weighed against and every baseline's plan are priced that way. Each group's predicted time
becomes that of the slowest block holding one of its ranks, so a round still lasts its slowest group. The search
itself compares groups priced alone, and skips static layouts by bounds of such prices: where the coupling makes a
round cheaper than its slowest group alone (a long document's group beside lighter ones: its experts' work drops to
the block's mean), a plan or a layout the coupled price would favour can be passed over.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver.plan import IDLE, Plan, RoundPlan


def expert_parallel_size(cost: CostModel) -> int:
    """Ranks a block of expert parallelism spans (1: no coupling by experts)."""
    return cost.table.expert_parallel


def own_expert_ms(cost: CostModel, tokens_on_rank: float | np.ndarray) -> np.ndarray:
    """The experts' work and all-to-alls a group priced alone pays for ranks holding `tokens_on_rank` tokens."""
    c = cost.coefficients
    tokens = np.asarray(tokens_on_rank, dtype=np.float64)
    return c.routed_expert_ms(tokens) + c.expert_exchange_ms(tokens)


def coupled_round(round_plan: RoundPlan, lengths: np.ndarray, cost: CostModel) -> RoundPlan:
    """`round_plan` with each group's time that of the slowest expert-parallel block holding one of its ranks
    (module docstring)."""
    ep = expert_parallel_size(cost)
    ranks = sum(g.degree for g in round_plan.groups)
    if ranks % ep:
        raise ValueError(f"expert parallelism over {ep} ranks needs a multiple of {ep} ranks, got {ranks}")
    before = np.zeros(ranks)
    tokens = np.zeros(ranks)
    for g in round_plan.groups:
        if g.algo == IDLE:
            continue
        per_rank = float(lengths[list(g.samples)].sum()) / g.degree
        tokens[g.ranks[0]:g.ranks[-1] + 1] = per_rank
        before[g.ranks[0]:g.ranks[-1] + 1] = g.predicted_ms - float(own_expert_ms(cost, per_rank))
    blocks_tokens = tokens.reshape(-1, ep)
    c = cost.coefficients
    block_ms = (before.reshape(-1, ep).max(axis=1) + c.routed_expert_ms(blocks_tokens.mean(axis=1))
                + c.expert_exchange_ms(blocks_tokens.max(axis=1)))
    groups = tuple(g if g.algo == IDLE else dataclasses.replace(
        g, predicted_ms=float(block_ms[g.ranks[0] // ep:g.ranks[-1] // ep + 1].max())) for g in round_plan.groups)
    return dataclasses.replace(round_plan, groups=groups, predicted_ms=max(g.predicted_ms for g in groups),
                               expert_coupled=True)


def priced_with_expert_exchange(plan: Plan, lengths: Sequence[int] | np.ndarray, cost: CostModel) -> Plan:
    """`plan` with every round priced as its expert-parallel blocks run it (unchanged without expert parallelism)."""
    if expert_parallel_size(cost) == 1:
        return plan
    length_arr = np.asarray(lengths, dtype=np.int64)
    rounds = tuple(coupled_round(r, length_arr, cost) for r in plan.rounds)
    return dataclasses.replace(plan, rounds=rounds, predicted_ms=float(sum(r.predicted_ms for r in rounds)),
                               extras={**plan.extras, "expert_parallel": expert_parallel_size(cost)})
