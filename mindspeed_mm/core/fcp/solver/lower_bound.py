"""A lower bound on the step time of any plan, so every plan carries its own optimality gap.

Two bounds, the larger counts:
- work: a round of makespan M offers N * M rank-milliseconds. A group of d ranks running samples S
  uses d * T(S, d) >= T(S, 1) of them (parallelism never shrinks the total work). On one rank there
  is no communication and the time is affine in the additive workload: T(S, 1) = F + sum over S of
  (T({i}, 1) - F), with F = T({}, 1) the fixed cost of a group. With at least R_min rounds of at
  least one group each, the step takes at least (R_min * F + T(V, 1) - F) / N for the whole batch V.
  T(., 1) is read from the cost model's relaxed copy (`CostModel.work_bound_model`: no memory limit, no
  attention call floor, the measured linear and vision curves replaced by affine lower envelopes): its
  times are never above the model's, and they are affine on one rank as the bound needs (a long
  sample's single-rank time is a bound even if it could never run there). Summing each sample's best device time
  min_d d * T({i}, d) instead would not be a bound: packing lets one sample's ring transfers hide
  under another's compute and shares the launch cost, so a packed group can use fewer
  rank-milliseconds than its samples would apart.
- longest sample: the round holding sample i lasts at least min_d T({i}, d) over its allowed
  degrees, as adding documents to a group never makes it faster. Only samples not dominated in
  (length, vision patches) can attain the maximum, so only those are evaluated.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.group_times import GroupTimer

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel

def undominated_samples(lengths: Sequence[int], patches: Sequence[int] | None) -> list[int]:
    """Samples that no other sample beats in both length and patches (one per identical pair)."""
    length_arr = np.asarray(lengths, dtype=np.int64)
    patch_arr = np.zeros_like(length_arr) if patches is None else np.asarray(patches, dtype=np.int64)
    # Longest first, then most patches, then lowest index; a sample is on the front when it has more
    # patches than every sample before it.
    order = np.lexsort((np.arange(length_arr.size), -patch_arr, -length_arr))
    sorted_patches = patch_arr[order]
    before = np.maximum.accumulate(np.concatenate([[-1], sorted_patches[:-1]]))
    return order[sorted_patches > before].tolist()


def step_lower_bound(
    cost: "CostModel",
    sample_workloads: Sequence[Any],
    lengths: Sequence[int],
    patches: Sequence[int] | None,
    timer: GroupTimer,
    num_ranks: int,
    min_rounds: int,
) -> float:
    """max(work bound, longest-sample bound) for one step; see the module docstring."""
    return max(work_bound(cost, lengths, patches, num_ranks, min_rounds),
               longest_sample_bound(cost, sample_workloads, lengths, patches, timer))


def work_bound(cost: "CostModel", lengths: Sequence[int], patches: Sequence[int] | None, num_ranks: int,
               min_rounds: int) -> float:
    """The work bound (module docstring) from T(V, 1) and F = T({}, 1) of `work_bound_model`."""
    twin = GroupTimer(cost.work_bound_model(), 1)
    times, _ = twin.evaluate([cost.workload(lengths, patches), cost.workload([])], [1, 1], 1, 1)
    whole_ms, empty_ms = times[:, 0].tolist()
    return (min_rounds * empty_ms + whole_ms - empty_ms) / num_ranks


def longest_sample_bound(
    cost: "CostModel", sample_workloads: Sequence[Any], lengths: Sequence[int], patches: Sequence[int] | None,
    timer: GroupTimer,
) -> float:
    """The longest-sample bound (module docstring), over the samples not dominated in (length, patches)."""
    front = undominated_samples(lengths, patches)
    times, _ = timer.evaluate([sample_workloads[i] for i in front], [cost.min_degree(lengths[i]) for i in front],
                              timer.max_degree)
    return float(times.min(axis=1).max())
