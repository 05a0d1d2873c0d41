"""Independent replicas (DDP) of a static layout, packed for the busiest replica's real time.

`StaticPacker` packs micro-batches balanced by the samples' times alone and deals them to the replicas; a
micro-batch's real time is less than the sum of its samples' (they share its fixed costs), so the replicas'
loads come out uneven by a few of those fixed costs. Two packings price every micro-batch as it grows:
- `marginal_packing`: samples, longest alone first, each where its replica's load ends least: added to a
  micro-batch with room (what that micro-batch then costs more) or as a micro-batch of its own;
- `rebalanced`: a packing improved by moving one sample at a time from the busiest replica to another
  replica's micro-batch with room (or a new one), as long as the busiest replica gets shorter.
"""
from __future__ import annotations

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.workload import WorkloadColumns
from mindspeed_mm.core.fcp.solver.static_layout import StaticPacks

_EPS = 1e-9


def rebalanced(packs: StaticPacks, dealt: list[list[int]], columns: WorkloadColumns, lengths: np.ndarray,
               cost: CostModel, max_moves: int | None = None) -> tuple[StaticPacks, list[list[int]]]:
    """`packs` dealt as `dealt` (each replica's micro-batches), with samples moved off the busiest replica while
    that shortens it (see the module docstring); micro-batches left empty are dropped. The micro-batches are
    priced as `packs.pack_ms` are (compact blocks)."""
    degree, algo = packs.degree, packs.algo
    capacity = degree * cost.capacity_tokens
    bin_of = packs.bin_of.copy()
    sums = packs.workloads.values.copy()            # [bins, 4] per micro-batch: tokens, docs, sum sq, patches
    times = np.asarray(packs.pack_ms, dtype=np.float64)
    replica_of = np.empty(len(times), dtype=np.int64)
    for j, mine in enumerate(dealt):
        replica_of[mine] = j
    replicas = len(dealt)
    samples = columns.values
    alone = cost.group_time_table(columns, np.full((len(samples), 1), degree, dtype=np.int64), algo)[:, 0]
    limit = max_moves if max_moves is not None else 4 * len(samples)

    def price(rows: np.ndarray) -> np.ndarray:
        return cost.group_time_table(WorkloadColumns(rows), np.full((len(rows), 1), degree, dtype=np.int64), algo)[:, 0]

    for _ in range(limit):
        loads = np.bincount(replica_of, weights=times, minlength=replicas)
        busiest = int(np.argmax(loads))
        mine = np.flatnonzero(replica_of[bin_of] == busiest)
        if mine.size <= 1:
            break
        source = bin_of[mine]
        # The busiest replica's load with each of its samples taken out of its micro-batch (0 when it empties).
        left = sums[source] - samples[mine]
        left_ms = np.where(left[:, 1] > 0, price(np.maximum(left, 0.0)), 0.0)
        busiest_after = loads[busiest] - times[source] + left_ms
        # Targets: every micro-batch of another replica with room, priced with the sample added.
        targets = np.flatnonzero(replica_of != busiest)
        room = sums[targets, 0][None, :] + samples[mine, 0][:, None] <= capacity
        pairs_s, pairs_t = np.nonzero(room)
        best_max, best = loads[busiest] - _EPS, None
        if pairs_s.size:
            target_bins = targets[pairs_t]
            grown = price(sums[target_bins] + samples[mine[pairs_s]])
            target_after = loads[replica_of[target_bins]] - times[target_bins] + grown
            others = _max_without(loads, busiest, replica_of[target_bins])
            new_max = np.maximum(np.maximum(busiest_after[pairs_s], target_after), others)
            k = int(np.argmin(new_max))
            if new_max[k] < best_max:
                best_max, best = new_max[k], (int(pairs_s[k]), int(target_bins[k]), float(grown[k]))
        # Or a micro-batch of its own on the least-loaded other replica.
        lightest = int(np.argmin(np.where(np.arange(replicas) == busiest, np.inf, loads)))
        alone_after = np.maximum(busiest_after, loads[lightest] + alone[mine])
        alone_max = np.maximum(alone_after, _max_without(loads, busiest, np.array([lightest]))[0])
        k = int(np.argmin(alone_max))
        if alone_max[k] < best_max:
            best_max, best = alone_max[k], (k, -1 - lightest, float(alone[mine[k]]))
        if best is None:
            break
        index, target, grown_ms = best
        sample, source_bin = int(mine[index]), int(source[index])
        sums[source_bin] = left[index]
        times[source_bin] = left_ms[index]
        if target < 0:   # a new micro-batch on replica -1 - target
            target = len(times)
            sums = np.vstack([sums, np.zeros((1, sums.shape[1]))])
            times = np.append(times, 0.0)
            replica_of = np.append(replica_of, -1 - best[1])
        sums[target] += samples[sample]
        times[target] = grown_ms
        bin_of[sample] = target
    # Drop emptied micro-batches, renumbering the rest in order.
    used = np.flatnonzero(sums[:, 1] > 0)
    renumber = np.full(len(times), -1, dtype=np.int64)
    renumber[used] = np.arange(used.size)
    new_dealt = [[int(renumber[b]) for b in used if replica_of[b] == j] for j in range(replicas)]
    packs = StaticPacks(degree, algo, renumber[bin_of], tuple(times[used].tolist()), WorkloadColumns(sums[used]))
    return packs, new_dealt


def marginal_packing(columns: WorkloadColumns, lengths: np.ndarray, cost: CostModel, degree: int, algo: str,
                     replicas: int) -> tuple[StaticPacks, list[list[int]]]:
    """The samples placed one by one, longest alone first (ties: the longer, then the lower index), each where its
    replica's load ends least: added to a micro-batch of at most degree x capacity tokens (its load grows by what
    that micro-batch then costs more) or as a new micro-batch of its own; ties to the lower replica, then to its
    micro-batches in the order they were opened, a new one last."""
    capacity = degree * cost.capacity_tokens
    samples = columns.values
    count = len(samples)
    alone = cost.group_time_table(columns, np.full((count, 1), degree, dtype=np.int64), algo)[:, 0]
    order = np.lexsort((np.arange(count), -lengths, -alone))
    sums = np.zeros((0, samples.shape[1]))
    times = np.zeros(0)
    replica_of = np.zeros(0, dtype=np.int64)
    bin_of = np.empty(count, dtype=np.int64)
    loads = np.zeros(replicas)
    everyone = np.arange(replicas)
    for sample in order.tolist():
        row = samples[sample]
        fits = np.flatnonzero(sums[:, 0] + row[0] <= capacity)
        grown = cost.group_time_table(WorkloadColumns(sums[fits] + row), np.full((fits.size, 1), degree,
                                                                                 dtype=np.int64), algo)[:, 0]
        # Candidates: each micro-batch with room (by replica, then opening order), and a new one on each replica.
        after = np.concatenate([loads[replica_of[fits]] - times[fits] + grown, loads + alone[sample]])
        replica = np.concatenate([replica_of[fits], everyone])
        position = np.concatenate([fits, np.full(replicas, len(times))])
        k = int(np.lexsort((position, replica, after))[0])
        if k < fits.size:
            target = int(fits[k])
            times[target] = grown[k]
            sums[target] += row
        else:
            target = len(times)
            sums = np.vstack([sums, row[None, :]])
            times = np.append(times, alone[sample])
            replica_of = np.append(replica_of, replica[k])
        loads[replica[k]] = after[k]
        bin_of[sample] = target
    dealt = [np.flatnonzero(replica_of == j).tolist() for j in range(replicas)]
    return StaticPacks(degree, algo, bin_of, tuple(times.tolist()), WorkloadColumns(sums)), dealt


def _max_without(loads: np.ndarray, busiest: int, changed: np.ndarray) -> np.ndarray:
    """Per entry of `changed`, the largest load of the replicas other than `busiest` and that one (0: none)."""
    rest = [j for j in np.argsort(-loads, kind="stable").tolist() if j != busiest][:2]
    first = loads[rest[0]] if rest else 0.0
    second = loads[rest[1]] if len(rest) > 1 else 0.0
    return np.where(changed == (rest[0] if rest else -1), second, first)
