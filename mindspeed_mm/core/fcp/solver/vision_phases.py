"""Rounds with vision work in lockstep (FSDP): the encoder and the decoder as two phases, and the encoder's work
spread over all the round's ranks.

Under FSDP every vision block and every decoder layer all-gathers its parameters over all ranks, so no rank
starts its decoder layers before the slowest rank has finished its encoder call, and a round lasts

    vision phase + the slowest group's decoder work

(the backward pass: the same two phases in reverse). Pricing each group as its own encoder work plus its own
decoder work (what plans of independent replicas, DDP, rightly do) under-prices such a round whenever the group
with the most vision work is not the group with the most decoder work.

The vision phase of a round (`vision_phase_ms`):
- each group encoding its own media, split evenly over its members (`fcp train`, upstream's static CP):
  the slowest member, max over groups of vision(P_g / d_g);
- the media spread over all N ranks of the round (`SolverConfig.vision_over_round`: MindSpeed-MM's Qwen3-VL
  path, `core/fcp/runtime/media_exchange.py`): vision(P / N), plus two small all-gathers that tell
  every rank the round's media, plus the exchange of what moves between groups: a rank of a group holding more
  than the round's share P / N sends its excess to ranks of groups holding less (pixels there, feature rows
  back, and with a trainable encoder their gradients), priced as inter-node all-to-alls of the largest per-rank
  excess or shortfall.
Media are counted as divisible (a long video splits at frame groups, a few hundred to a few thousand patches).

`priced_in_phases` re-prices a plan's rounds that way (the planner prices its candidates so: its plan made with
each sample's patches, the plan of the decoder work alone, which leaves the vision work to the phase, and every
static layout).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.coefficients import BYTES_PER_ELEMENT
from mindspeed_mm.core.fcp.solver.plan import IDLE, Plan, RoundPlan
from mindspeed_mm.core.fcp.solver.placement import placed_node_part

PIXEL_BYTES = 4
"""Bytes of one pixel value as the data loader hands it over (float32, as Qwen3-VL's processor returns it)."""
RECORD_BYTES = 1024
"""Bytes each rank all-gathers to tell the round its group's media and its needed rows (a few dozen int64)."""


def vision_rank_ms(cost: CostModel, patches_on_rank: float) -> float:
    """One encoder call of a rank encoding `patches_on_rank` patches (0 for none)."""
    return float(cost.coefficients.vision_ms(np.asarray(float(patches_on_rank))))


def _group_patches(round_plan: RoundPlan, patches: Sequence[int] | np.ndarray) -> list[tuple[int, int]]:
    """(patches, degree) of every group of the round that runs samples."""
    patch_arr = np.asarray(patches, dtype=np.int64)
    running = [g for g in round_plan.groups if g.algo != IDLE]
    members = np.fromiter((i for g in running for i in g.samples), dtype=np.int64)
    owners = np.repeat(np.arange(len(running)), [len(g.samples) for g in running])
    sums = np.bincount(owners, weights=patch_arr[members], minlength=len(running))
    return [(int(total), g.degree) for total, g in zip(sums.tolist(), running)]


def vision_exchange_ms(cost: CostModel, moved_patches: float) -> float:
    """Moving `moved_patches` patches' worth between one rank and ranks of other groups: their pixels one way,
    their feature rows back (and, with a trainable encoder, the rows' gradients), inter-node all-to-alls."""
    vision = cost.table.model.vision
    if vision is None or moved_patches <= 0:
        return 0.0
    tm = cost.table.time
    dtype_bytes = BYTES_PER_ELEMENT[cost.table.dtype]
    row_bytes = cost.table.model.hidden * vision.mergers * dtype_bytes / vision.spatial_merge ** 2
    pixel_bytes = 3 * vision.temporal_patch * vision.patch_size ** 2 * PIXEL_BYTES
    passes = 1 if "vision_frozen" in cost.table.provenance else 2
    return float(tm.all_to_all_inter_ms(moved_patches * pixel_bytes)
                 + passes * tm.all_to_all_inter_ms(moved_patches * row_bytes))


def vision_phase_ms(round_plan: RoundPlan, patches: Sequence[int] | np.ndarray | None, cost: CostModel,
                    over_round: bool) -> float:
    """The round's vision phase (module docstring): its slowest rank's encoder call (and exchange)."""
    if patches is None:
        return 0.0
    groups = _group_patches(round_plan, patches)
    total = sum(p for p, _ in groups)
    if total == 0:
        return 0.0
    if not over_round:
        return float(cost.coefficients.vision_ms(np.array([p / d for p, d in groups if p], dtype=np.float64)).max())
    ranks = sum(g.degree for g in round_plan.groups)
    share = total / ranks
    moved = max(abs(p / d - share) for p, d in groups)
    idle_ranks = ranks - sum(d for _, d in groups)
    if idle_ranks:
        moved = max(moved, share)
    return vision_rank_ms(cost, share) + vision_records_ms(cost) + vision_exchange_ms(cost, moved)


def vision_records_ms(cost: CostModel) -> float:
    """The two all-gathers that tell every rank of a spread round every group's media (priced as all-to-alls of
    `RECORD_BYTES` across nodes: the table has no all-gather curve)."""
    return 2.0 * float(cost.table.time.all_to_all_inter_ms(RECORD_BYTES))


def priced_in_phases(plan: Plan, lengths: Sequence[int] | np.ndarray, patches: Sequence[int] | np.ndarray,
                     cost: CostModel, ranks_per_node: int, over_round: bool) -> Plan:
    """`plan` with each round priced as its vision phase plus each group's decoder work (module docstring);
    with `over_round`, each round whose phase is shorter with its media spread over all its ranks is so run."""
    length_arr = np.asarray(lengths, dtype=np.int64)
    patch_arr = None if patches is None else np.asarray(patches, dtype=np.int64)
    running = [g for round_plan in plan.rounds for g in round_plan.groups if g.algo != IDLE]
    # The decoder work of every group, placed where it is, in one evaluation of the cost model: the groups' text
    # workloads summed from the samples' columns at once.
    members = np.fromiter((i for g in running for i in g.samples), dtype=np.int64)
    owners = np.repeat(np.arange(len(running)), [len(g.samples) for g in running])
    columns = cost.workload_columns(length_arr).group_sums(members, owners, len(running))
    text_ms = cost.placed_time_table(
        columns, [g.degree for g in running],
        [placed_node_part(g.ranks[0], g.degree, ranks_per_node) for g in running], [g.algo for g in running])
    text_in_order = iter(text_ms.tolist())  # the running groups, round by round
    rounds = []
    for round_plan in plan.rounds:
        phase = vision_phase_ms(round_plan, patch_arr, cost, False)
        spread = over_round and phase > 0 and vision_phase_ms(round_plan, patch_arr, cost, True) < phase
        if spread:
            phase = vision_phase_ms(round_plan, patch_arr, cost, True)
        groups = tuple(g if g.algo == IDLE else dataclasses.replace(g, predicted_ms=phase + next(text_in_order))
                       for g in round_plan.groups)
        rounds.append(RoundPlan(groups=groups, predicted_ms=max(g.predicted_ms for g in groups),
                                vision_ms=phase, vision_over_round=spread))
    return dataclasses.replace(plan, rounds=tuple(rounds), predicted_ms=float(sum(r.predicted_ms for r in rounds)))
