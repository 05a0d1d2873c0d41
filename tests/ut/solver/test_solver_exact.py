"""Exact reference: both formulations agree, and the planner's gap to the optimum on small instances.

The full acceptance run (200 instances) is in benchmarks/solver_bench.py; this test runs a seeded
subset of the same kind of instances so that it stays within a unit-test budget.
"""
import numpy as np
import pytest

from mindspeed_mm.core.fcp.solver import SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.exact import solve_exact
from mindspeed_mm.core.fcp.solver.planner import plan_batch
from solver_fakes import FakeCostModel, FakeTable
from scenario_costs import a3_scenario

A3_8B = a3_scenario()
FAKE = FakeCostModel(FakeTable(capacity_tokens=16384, ranks_per_node=8))
GAP_INSTANCES = 200


def _instance(rng: np.random.Generator, cost, max_samples: int = 10, max_ranks: int = 8):
    n = int(rng.integers(1, max_samples + 1))
    num_ranks = int(rng.integers(1, max_ranks + 1))
    capacity = cost.capacity_tokens
    lengths = np.exp(rng.normal(np.log(capacity * 0.4), 1.0, size=n)).astype(int)
    lengths = np.clip(lengths, 64, capacity * num_ranks).tolist()
    need = -(-max(lengths) // capacity)
    max_degree = None if rng.random() < 0.8 else int(rng.integers(need, num_ranks + 1))
    max_rounds = None if rng.random() < 0.85 else int(rng.integers(1, 3))
    return lengths, SolverConfig(num_ranks, ranks_per_node=cost.ranks_per_node, max_degree=max_degree,
                                 max_rounds=max_rounds)


@pytest.mark.parametrize("cost", [A3_8B, FAKE], ids=["a3-8b", "fake"])
def test_round_partition_and_direct_milp_agree(cost):
    rng = np.random.default_rng(21)
    for _ in range(12):
        lengths, config = _instance(rng, cost, max_samples=5, max_ranks=4)
        by_rounds = solve_exact(lengths, cost, config)
        by_groups = solve_exact(lengths, cost, config, method="groups")
        assert by_rounds.status == by_groups.status
        if by_rounds.status == "optimal":
            assert by_rounds.objective_ms == pytest.approx(by_groups.objective_ms, rel=1e-9)
            validate_plan(by_rounds.plan, lengths, cost)
            validate_plan(by_groups.plan, lengths, cost)


def test_exact_hand_made_case():
    # Two samples, two ranks, no memory pressure: one per rank in one round beats every alternative
    # (a shared degree-2 group pays communication, two rounds pay two launches).
    lengths = [4000, 4000]
    config = SolverConfig(2, ranks_per_node=16)
    result = solve_exact(lengths, A3_8B, config)
    assert result.status == "optimal"
    assert result.plan.num_rounds == 1
    assert sorted(g.samples for g in result.plan.rounds[0].groups) == [(0,), (1,)]
    single = float(A3_8B.best_time_ms(A3_8B.workload([4000]), np.array([1]))[0][0])
    assert result.objective_ms == pytest.approx(single)


def test_exact_rejects_large_batches_and_bad_method():
    with pytest.raises(ValueError, match="1..12 samples"):
        solve_exact([100] * 13, A3_8B, SolverConfig(4))
    with pytest.raises(ValueError, match="method"):
        solve_exact([100], A3_8B, SolverConfig(4), method="simplex")
    with pytest.raises(ValueError, match="sample 1"):
        solve_exact([100, 0], A3_8B, SolverConfig(4))


def test_planner_gap_to_the_optimum_on_small_instances():
    rng = np.random.default_rng(2024)
    gaps = []
    for _ in range(GAP_INSTANCES):
        lengths, config = _instance(rng, A3_8B)
        exact = solve_exact(lengths, A3_8B, config, time_limit_s=30)
        assert exact.status in ("optimal", "infeasible")
        if exact.status == "infeasible":
            with pytest.raises(ValueError):
                plan_batch(lengths, A3_8B, config)
            continue
        plan = plan_batch(lengths, A3_8B, config)  # feasible whenever the exact model is
        validate_plan(plan, lengths, A3_8B)
        # nothing beats the optimum, and the bound is below it
        assert plan.predicted_ms >= exact.objective_ms * (1 - 1e-9)
        assert plan.lower_bound_ms <= exact.objective_ms * (1 + 1e-9)
        gaps.append(plan.predicted_ms / exact.objective_ms - 1)
    assert len(gaps) >= GAP_INSTANCES * 0.9
    print(f"gap over {len(gaps)} feasible instances: mean {np.mean(gaps):.4%}, max {max(gaps):.4%}")
    assert float(np.mean(gaps)) <= 0.03, f"mean gap {np.mean(gaps):.4f}, worst {max(gaps):.4f}"
