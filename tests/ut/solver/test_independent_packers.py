"""FCP under DDP semantics (replicas that meet once per step) against static layouts packed by packers written
here, apart from the planner's code: no static DP x CP layout they find is faster than FCP's plan.

Two packers, each on every static (degree, algo) that holds the batch, every micro-batch priced by the cost model
as a whole group:
- marginal: samples longest alone first, each where its replica's load ends least (into a micro-batch with room,
  paying what that micro-batch then costs more, or as a new micro-batch);
- two-stage: samples dealt longest alone first to the replica with the least summed alone time, then each
  replica's samples packed first-fit decreasing (by tokens) into the fewest micro-batches.
A replica runs its micro-batches back to back; the step is its busiest replica plus one gradient reduction and the
optimizer step (`replicas_step_ms`)."""
from __future__ import annotations

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.step_time import INDEPENDENT, replicas_step_ms, step_ms
from scenario_costs import a3_scenario


def _times(cost: CostModel, rows: list[np.ndarray], degree: int, algo: str) -> list[float]:
    """Each workload row (tokens, documents, sum of squares, patches) as one group of `degree`."""
    if not rows:
        return []
    table = cost.group_time_table(WorkloadColumns(np.array(rows, dtype=np.float64)),
                                  np.full((len(rows), 1), degree, dtype=np.int64), algo)
    return table[:, 0].tolist()


def _sample_rows(lengths: np.ndarray, patches: np.ndarray) -> list[np.ndarray]:
    return [np.array([float(n), 1.0, float(n) * float(n), float(p)]) for n, p in zip(lengths, patches)]


def marginal_packer(lengths, patches, cost, degree, algo, replicas) -> float:
    """The busiest replica's time, samples placed one at a time where their replica's load ends least."""
    capacity = degree * cost.capacity_tokens
    rows = _sample_rows(lengths, patches)
    alone = _times(cost, rows, degree, algo)
    order = sorted(range(len(rows)), key=lambda i: (-alone[i], -int(lengths[i]), i))
    packs: list[list[np.ndarray]] = [[] for _ in range(replicas)]    # per replica, its micro-batches' sums
    pack_ms: list[list[float]] = [[] for _ in range(replicas)]
    load = [0.0] * replicas
    for i in order:
        choices = []   # (load after, replica, micro-batch index or len for a new one)
        for r in range(replicas):
            open_ones = [k for k, s in enumerate(packs[r]) if s[0] + lengths[i] <= capacity]
            grown = _times(cost, [packs[r][k] + rows[i] for k in open_ones], degree, algo)
            choices += [(load[r] - pack_ms[r][k] + ms, r, k) for k, ms in zip(open_ones, grown)]
            choices.append((load[r] + alone[i], r, len(packs[r])))
        after, r, k = min(choices)
        if k == len(packs[r]):
            packs[r].append(rows[i].copy())
            pack_ms[r].append(alone[i])
        else:
            packs[r][k] = packs[r][k] + rows[i]
            pack_ms[r][k] = _times(cost, [packs[r][k]], degree, algo)[0]
        load[r] = after
    return max(load)


def two_stage_packer(lengths, patches, cost, degree, algo, replicas) -> float:
    """The busiest replica's time, samples dealt by their alone times, then packed first-fit decreasing."""
    capacity = degree * cost.capacity_tokens
    rows = _sample_rows(lengths, patches)
    alone = _times(cost, rows, degree, algo)
    mine: list[list[int]] = [[] for _ in range(replicas)]
    summed = [0.0] * replicas
    for i in sorted(range(len(rows)), key=lambda i: (-alone[i], i)):
        r = min(range(replicas), key=lambda r: (summed[r], r))
        mine[r].append(i)
        summed[r] += alone[i]
    busiest = 0.0
    for samples in mine:
        bins: list[np.ndarray] = []
        for i in sorted(samples, key=lambda i: (-int(lengths[i]), i)):
            room = next((k for k, s in enumerate(bins) if s[0] + lengths[i] <= capacity), None)
            if room is None:
                bins.append(rows[i].copy())
            else:
                bins[room] = bins[room] + rows[i]
        busiest = max(busiest, sum(_times(cost, bins, degree, algo)))
    return busiest


def _static_layouts(cost: CostModel, ranks: int, longest: int):
    for algo in cost.algos:
        for degree in range(1, ranks + 1):
            if ranks % degree or cost.min_degree(longest) > degree:
                continue
            if algo == "ulysses" and not cost.ulysses_supported(degree):
                continue
            # Compact blocks only: a replica's block inside one node (or whole nodes), so a group costs its
            # micro-batch's time wherever the replica sits.
            node = cost.ranks_per_node
            if degree % node and node % degree:
                continue
            yield degree, algo


@pytest.mark.parametrize(("workload", "ranks", "per_rank", "seed"), [
    ("internvid", 64, 4, 0), ("bimodal", 32, 4, 1), ("imagevideo", 16, 4, 2), ("openvid", 16, 4, 3)])
def test_no_static_ddp_layout_packed_here_beats_fcp(workload: str, ranks: int, per_rank: int, seed: int) -> None:
    cost = a3_scenario(shard_ranks=ranks)
    config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node, vision_over_round=False,
                          step_semantics=INDEPENDENT)
    lengths, patches = draw_lengths(workload, per_rank * ranks, 1000 * seed + 11)
    plan = plan_batch(lengths.tolist(), cost, config, patches.tolist())
    validate_plan(plan, lengths.tolist(), cost, patches.tolist(), priced=True)
    fcp = step_ms(plan, cost, INDEPENDENT)
    found = {}
    for degree, algo in _static_layouts(cost, ranks, int(lengths.max())):
        for name, packer in (("marginal", marginal_packer), ("two-stage", two_stage_packer)):
            found[(name, degree, algo)] = replicas_step_ms(
                packer(lengths, patches, cost, degree, algo, ranks // degree), cost)
    best = min(found, key=found.get)
    print(f"{workload} {ranks} ranks: FCP {fcp:.0f} ms, best static here {found[best]:.0f} ms {best}")
    assert fcp <= found[best] * (1 + 1e-9), (best, found[best], fcp)
