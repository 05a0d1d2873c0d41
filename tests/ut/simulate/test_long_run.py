"""Long simulated runs with a drifting cost model: no rank ever joins more communicators than the budget.

The runs plan fewer samples per rank than a training batch (2 and 1) to stay fast; on these workloads unbounded
plans reach many times the budget within the same steps. `benchmarks/communicator_budget.py` runs 3,000 steps of
every workload at 8 samples per rank (benchmarks/results/communicator_budget.md).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.long_run import Drift, DriftingFactors, simulate_long_run
from mindspeed_mm.core.fcp.solver import SolverConfig


@pytest.mark.parametrize("preset, ranks, per_rank, steps", [
    ("h200-qwen3vl-8b", 64, 2, 200),
    ("a3-qwen3vl-8b", 256, 1, 100),
])
def test_the_budget_holds_over_a_drifting_run(preset, ranks, per_rank, steps) -> None:
    cost = CostModel.from_preset(preset, shard_ranks=ranks)
    budget = math.ceil(math.log2(ranks)) + 4
    run = simulate_long_run(cost, SolverConfig(ranks, ranks_per_node=cost.ranks_per_node), "imagevideo", steps,
                            samples_per_rank=per_rank, seed=7, drift=Drift(seed=7))
    assert run.budget == budget
    assert budget - 2 <= run.worst <= budget   # close to the budget (it binds), never above
    assert [worst for _, worst in run.growth] == sorted({worst for _, worst in run.growth})
    # The same steps without a budget: far more groups per rank within a third of the run.
    unbounded = simulate_long_run(cost, SolverConfig(ranks, ranks_per_node=cost.ranks_per_node,
                                                     communicator_budget=None),
                                  "imagevideo", steps // 3, samples_per_rank=per_rank, seed=7, drift=Drift(seed=7))
    assert unbounded.worst > 2 * budget


def test_runs_are_deterministic_and_the_drift_stays_within_its_bounds() -> None:
    cost = CostModel.from_preset("a3-qwen3vl-8b", shard_ranks=64)
    config = SolverConfig(64, ranks_per_node=16)
    runs = [simulate_long_run(cost, config, "openvid", 12, samples_per_rank=2, seed=3, drift=Drift(seed=3))
            for _ in range(2)]
    assert runs[0].per_rank.tolist() == runs[1].per_rank.tolist() and runs[0].growth == runs[1].growth
    assert runs[0].step_ms == runs[1].step_ms
    factors = DriftingFactors(Drift(spread=0.15, step=0.05, seed=1))
    walk = np.array([factors.factor(step, 4, "ring") for step in range(2000)])
    assert walk.min() >= 0.85 and walk.max() <= 1.15
    assert walk.max() - walk.min() > 0.2   # it wanders across the band
    assert factors.factor(10, 4, "ring") == DriftingFactors(Drift(spread=0.15, step=0.05, seed=1)).factor(10, 4, "ring")
