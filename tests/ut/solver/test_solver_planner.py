"""plan_batch: properties over random batches, hand-made cases, errors, determinism, lower bound."""

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from dataclasses import replace

from mindspeed_mm.core.fcp.solver import InfeasibleSampleError, InvalidPlanError, SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.plan import IDLE
from mindspeed_mm.core.fcp.solver.errors import NoLayoutInBudgetError
from mindspeed_mm.core.fcp.solver.lower_bound import undominated_samples
from mindspeed_mm.core.fcp.simulate.workloads import generate_samples
from mindspeed_mm.core.fcp.solver.baselines import BaselineInfeasibleError, deepspeed_ulysses, megatron_static_cp
from mindspeed_mm.core.fcp.solver.placement import placed_node_part
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import planner
from mindspeed_mm.core.fcp.solver.planner import plan_batch
from solver_fakes import FakeCostModel, FakeTable
from scenario_costs import a3_scenario

A3_8B = a3_scenario()
# A small memory budget so that short batches already need context parallelism and several rounds.
A3_8B_TIGHT = a3_scenario(max_tokens_per_rank=8192)
H100_2B = CostModel.from_preset("h100-qwen3vl-2b", max_tokens_per_rank=16384)
FAKE = FakeCostModel(FakeTable(capacity_tokens=8192, ranks_per_node=8))


def _random_case(rng, cost):
    n = int(rng.integers(1, 48))
    num_ranks = int(rng.choice([1, 2, 3, 5, 8, 12, 16, 24, 32]))
    capacity = cost.capacity_tokens
    lengths = np.exp(rng.normal(np.log(capacity * 0.5), 1.1, size=n)).astype(int)
    lengths = np.clip(lengths, 16, capacity * num_ranks).tolist()
    max_degree = None if rng.random() < 0.7 else int(rng.integers(max(1, -(-max(lengths) // capacity)),
                                                               num_ranks + 1))
    config = SolverConfig(num_ranks, ranks_per_node=cost.ranks_per_node, max_degree=max_degree)
    return lengths, config


def _search_only_for_the_fake(cost, monkeypatch):
    """The fake model has no workload columns, which the static layouts a plan is weighed against are
    packed with: with it the planner's search alone is tested."""
    if cost is FAKE:
        monkeypatch.setattr(planner, "fastest_for_lockstep_rounds", lambda plan, *args: plan)


@pytest.mark.parametrize("cost", [A3_8B_TIGHT, H100_2B, FAKE], ids=["a3-8b-8k", "h100-2b-16k", "fake"])
def test_random_batches_give_valid_node_aware_deterministic_plans(cost, monkeypatch):
    _search_only_for_the_fake(cost, monkeypatch)
    rng = np.random.default_rng(11)
    for _ in range(25):
        lengths, config = _random_case(rng, cost)
        catalogue = config.catalogue(cost.algos, cost.hybrid_rule.block)
        longest = -(-max(lengths) // cost.capacity_tokens)
        try:
            plan = plan_batch(lengths, cost, config)
        except NoLayoutInBudgetError:
            # Only where no static layout of the budget's groups holds the longest sample (a maximum degree that
            # is not a power of two); otherwise one always exists.
            assert max(catalogue.static_degrees()) < longest
            continue
        # coverage, memory, degrees sum to N, contiguous ranks, feasible algo, consistent times
        validate_plan(plan, lengths, cost, priced=True)
        catalogue.check_plan(plan)
        rpn = config.ranks_per_node
        straddling = sum(1 for r in plan.rounds for g in r.groups
                         if g.degree <= rpn and g.ranks[0] // rpn != g.ranks[-1] // rpn)
        assert straddling == plan.extras["cross_node_groups"]
        assert all(g.degree <= config.degree_limit for r in plan.rounds for g in r.groups)
        assert plan.lower_bound_ms <= plan.predicted_ms * (1 + 1e-9)
        again = plan_batch(lengths, cost, config)
        assert again.digest() == plan.digest()
        assert {k: v for k, v in again.to_json().items() if k != "solver_ms"} == \
            {k: v for k, v in plan.to_json().items() if k != "solver_ms"}


def test_patches_are_planned_and_validated():
    rng = np.random.default_rng(2)
    lengths = rng.integers(500, 20000, size=30).tolist()
    patches = [4 * x for x in lengths]
    config = SolverConfig(16, ranks_per_node=16)
    plan = plan_batch(lengths, A3_8B, config, patches=patches)
    validate_plan(plan, lengths, A3_8B, patches=patches, priced=True)
    without = plan_batch(lengths, A3_8B, config)
    assert plan.predicted_ms > without.predicted_ms  # the vision encoder adds work


def test_one_sample_gets_every_rank():
    plan = plan_batch([50_000], A3_8B, SolverConfig(8, ranks_per_node=16))
    assert len(plan.rounds) == 1 and len(plan.rounds[0].groups) == 1
    group = plan.rounds[0].groups[0]
    assert group.ranks == tuple(range(8)) and group.samples == (0,)


def test_equal_short_samples_run_data_parallel():
    # Eight equal short samples on eight ranks: one sample per rank is the balanced layout.
    plan = plan_batch([4000] * 8, A3_8B, SolverConfig(8, ranks_per_node=16))
    assert plan.num_rounds == 1
    assert sorted(len(g.samples) for g in plan.rounds[0].groups) == [1] * 8


def test_memory_forces_rounds():
    # 4 samples of 8,000 tokens, 2 ranks of 8,192 tokens: two per round at most.
    plan = plan_batch([8000] * 4, A3_8B_TIGHT, SolverConfig(2, ranks_per_node=16))
    assert plan.num_rounds == 2
    validate_plan(plan, [8000] * 4, A3_8B_TIGHT, priced=True)


def test_max_rounds_is_respected_or_named():
    lengths = [3000] * 12
    plan = plan_batch(lengths, A3_8B_TIGHT, SolverConfig(4, ranks_per_node=16, max_rounds=2))
    assert plan.num_rounds <= 2
    with pytest.raises(ValueError, match=r"the 1 rounds allowed by SolverConfig.max_rounds \(a Python API setting.*"
                                         r"raise or unset max_rounds.*--ranks"):
        plan_batch(lengths, A3_8B_TIGHT, SolverConfig(4, ranks_per_node=16, max_rounds=1))


def test_errors_name_the_problem():
    config = SolverConfig(4, ranks_per_node=16)
    with pytest.raises(ValueError, match="empty"):
        plan_batch([], A3_8B, config)
    with pytest.raises(ValueError, match="sample 2: length must be a positive integer, got 0"):
        plan_batch([10, 20, 0], A3_8B, config)
    with pytest.raises(ValueError, match="sample 1: length must be a positive integer, got -5"):
        plan_batch([10, -5], A3_8B, config)
    with pytest.raises(ValueError, match="sample 0: length must be an integer"):
        plan_batch([12.5], A3_8B, config)
    with pytest.raises(ValueError, match="patches has 1 entries for 2 samples"):
        plan_batch([10, 20], A3_8B, config, patches=[3])
    with pytest.raises(ValueError, match="sample 1: patches must be a non-negative integer"):
        plan_batch([10, 20], A3_8B, config, patches=[3, -1])
    with pytest.raises(ValueError, match="num_ranks"):
        plan_batch([10], A3_8B, SolverConfig(0))


def test_infeasible_sample_error_names_index_length_capacity_and_max_degree():
    config = SolverConfig(8, ranks_per_node=16, max_degree=2)
    with pytest.raises(InfeasibleSampleError) as info:
        plan_batch([1000, 20000, 5000], A3_8B_TIGHT, config)
    err = info.value
    assert (err.index, err.length, err.capacity_tokens, err.max_degree) == (1, 20000, 8192, 2)
    assert "sample 1" in str(err) and "20000" in str(err) and "8192" in str(err) and "2" in str(err)
    assert isinstance(err, ValueError)


def test_large_batch_is_planned_quickly_enough_for_a_unit_test():
    rng = np.random.default_rng(0)
    lengths = np.exp(rng.normal(8.3, 0.7, size=512)).astype(int).clip(64).tolist()
    plan = plan_batch(lengths, A3_8B, SolverConfig(64, ranks_per_node=16))
    validate_plan(plan, lengths, A3_8B, priced=True)
    assert plan.predicted_ms <= 1.25 * plan.lower_bound_ms


# ---------------------------------------------------------------- what the lower bound relies on
@pytest.mark.parametrize("cost", [A3_8B, H100_2B, CostModel.from_preset("h200-qwen3vl-8b")],
                         ids=["a3-8b", "h100-2b", "h200-8b-measured"])
def test_cost_model_properties_behind_the_lower_bound(cost):
    twin = cost.work_bound_model()
    empty = twin.workload([])
    fixed = float(twin.best_time_ms(empty, np.array([1]))[0][0])
    rng = np.random.default_rng(4)
    for _ in range(20):
        a = rng.integers(100, 80000, size=int(rng.integers(1, 5))).tolist()
        b = rng.integers(100, 80000, size=int(rng.integers(1, 5))).tolist()
        one = np.array([1])
        t_a, t_b, t_ab = (float(twin.best_time_ms(twin.workload(x), one)[0][0]) for x in (a, b, a + b))
        # affine on one rank
        assert t_ab - fixed == pytest.approx((t_a - fixed) + (t_b - fixed), rel=1e-9)
        degrees = np.arange(1, 65)
        times = twin.best_time_ms(twin.workload(a + b), degrees)[0]
        # d ranks never use fewer rank-milliseconds than one rank
        assert np.all(degrees * times >= t_ab * (1 - 1e-12))
        # adding documents never speeds a group up
        assert np.all(times >= twin.best_time_ms(twin.workload(a), degrees)[0] * (1 - 1e-12))
        # the model the work bound reads is never above the model itself
        real = cost.without_memory_limit().best_time_ms(cost.workload(a + b), degrees)[0]
        assert np.all(times <= real * (1 + 1e-12))


def test_undominated_samples():
    assert undominated_samples([5, 9, 9, 3], None) == [1]
    assert undominated_samples([5, 9, 3, 4], [50, 10, 80, 80]) == [1, 0, 3]


# ---------------------------------------------------------------- large batches (lean search)
def _large_case(rng, cost):
    n = int(rng.integers(120, 400))
    num_ranks = int(rng.choice([24, 32, 48, 64]))
    dataset = str(rng.choice(["openvid", "internvid", "msrvtt"]))
    batch = generate_samples(dataset, n, seed=int(rng.integers(0, 1000)))
    capacity = cost.capacity_tokens
    lengths = np.minimum(batch.lengths, capacity * num_ranks // 4).tolist()
    need = -(-max(lengths) // capacity)
    max_degree = None if rng.random() < 0.7 else int(rng.integers(need, num_ranks + 1))
    patches = batch.vision_patches.tolist() if rng.random() < 0.7 and not isinstance(cost, FakeCostModel) else None
    return lengths, patches, SolverConfig(num_ranks, ranks_per_node=cost.ranks_per_node, max_degree=max_degree)


@pytest.mark.parametrize("cost", [A3_8B, H100_2B, FAKE], ids=["a3-8b", "h100-2b-16k", "fake"])
def test_large_random_batches_give_valid_node_aware_deterministic_plans(cost, monkeypatch):
    _search_only_for_the_fake(cost, monkeypatch)
    rng = np.random.default_rng(17)
    for _ in range(6):
        lengths, patches, config = _large_case(rng, cost)
        assert len(lengths) * config.num_ranks > 256   # the lean search
        plan = plan_batch(lengths, cost, config, patches)
        validate_plan(plan, lengths, cost, patches, priced=True)
        rpn = config.ranks_per_node
        straddling = sum(1 for r in plan.rounds for g in r.groups
                         if g.degree <= rpn and g.ranks[0] // rpn != g.ranks[-1] // rpn)
        assert straddling == plan.extras["cross_node_groups"]
        assert all(g.degree <= config.degree_limit for r in plan.rounds for g in r.groups)
        assert plan.lower_bound_ms <= plan.predicted_ms * (1 + 1e-9)
        assert plan_batch(lengths, cost, config, patches).digest() == plan.digest()


@pytest.mark.parametrize("dataset", ["openvid", "internvid", "msrvtt"])
def test_large_batches_beat_the_static_layouts_and_stay_near_the_bound(dataset):
    config = SolverConfig(64, ranks_per_node=16)
    for seed in range(3):
        batch = generate_samples(dataset, 512, seed=seed)
        lengths, patches = batch.lengths.tolist(), batch.vision_patches.tolist()
        plan = plan_batch(lengths, A3_8B, config, patches)
        assert plan.predicted_ms <= 1.05 * plan.lower_bound_ms
        for static in (megatron_static_cp, deepspeed_ulysses):
            for degree in (1, 2, 4):
                try:
                    baseline = static(lengths, A3_8B, config, patches, cp_degree=degree)
                except BaselineInfeasibleError:
                    continue
                # Equal-size groups are the planner's starts too: at worst the same layout, up to the
                # rounding of a different but equally balanced spread.
                assert plan.predicted_ms <= baseline.predicted_ms * (1 + 1e-5), (static.__name__, degree, seed)


def test_group_placed_across_a_node_boundary_is_priced_where_it_runs():
    # On 16 ranks of 8 per node, groups of 6 + 4 + 6 ranks cannot all stay inside a node.
    cost = a3_scenario(hardware="h100", shard_ranks=16)
    lengths = [4346, 4898, 3426]
    # Contiguous placement (no communicator budget: the slot grid keeps such groups inside a node).
    plan = plan_batch(lengths, cost, SolverConfig(16, ranks_per_node=8, communicator_budget=None))
    validate_plan(plan, lengths, cost, priced=True)
    crossing = [g for r in plan.rounds for g in r.groups if g.ranks[0] // 8 != g.ranks[-1] // 8 and g.degree <= 8]
    assert len(crossing) == plan.extras["cross_node_groups"] >= 1
    for g in crossing:
        part = placed_node_part(g.ranks[0], g.degree, 8)
        workload = cost.workload([lengths[i] for i in g.samples])
        assert part < g.degree
        assert (g.predicted_ms, g.algo) == cost.best_placed_time_ms(workload, g.degree, part)
        assert g.predicted_ms > float(cost.best_time_ms(workload, g.degree)[0][0])
    assert plan.predicted_ms == sum(max(g.predicted_ms for g in r.groups) for r in plan.rounds)
    # Priced as if inside one node, the plan still executes but is rejected as a priced plan.
    g = crossing[0]
    cheap = replace(g, predicted_ms=float(cost.best_time_ms(cost.workload([lengths[i] for i in g.samples]),
                                                           g.degree)[0][0]))
    rounds = []
    for r in plan.rounds:
        groups = tuple(cheap if x is g else x for x in r.groups)
        rounds.append(replace(r, groups=groups, predicted_ms=max(x.predicted_ms for x in groups)))
    underpriced = replace(plan, rounds=tuple(rounds), predicted_ms=sum(r.predicted_ms for r in rounds))
    validate_plan(underpriced, lengths, cost)
    with pytest.raises(InvalidPlanError, match="below the .* where it is placed"):
        validate_plan(underpriced, lengths, cost, priced=True)


def test_short_sample_on_many_ranks_leaves_ranks_idle_when_allowed():
    cost = a3_scenario(shard_ranks=1024)
    forced = plan_batch([5000], cost, SolverConfig(1024, ranks_per_node=16))
    idle = plan_batch([5000], cost, SolverConfig(1024, ranks_per_node=16, allow_idle_ranks=True))
    validate_plan(idle, [5000], cost, priced=True)
    (group,) = [g for g in idle.rounds[0].groups if g.samples]
    # The fastest group of the run's catalogue (its degrees, hybrid where it has rings), priced as the planner does.
    catalogue = SolverConfig(1024, ranks_per_node=16).catalogue(cost.algos, cost.hybrid_rule.block)
    priced = cost.with_hybrid_degrees(frozenset(catalogue.hybrid_degrees))
    degrees = np.asarray(catalogue.search_degrees)
    times = priced.best_time_ms(priced.workload([5000]), degrees)[0]
    assert group.degree == int(degrees[np.argmin(times)]) < 1024
    assert group.predicted_ms == idle.predicted_ms == float(times.min()) < forced.predicted_ms
    assert sum(g.degree for g in idle.rounds[0].groups if g.algo == IDLE) == 1024 - group.degree


def test_idle_groups_hold_nothing():
    # With ring and Ulysses a short sample is fastest on part of the ranks (hybrid 16 x 4 uses all 64).
    cost = a3_scenario(shard_ranks=64, algos=("ring", "ulysses"))
    plan = plan_batch([5000], cost, SolverConfig(64, ranks_per_node=16, allow_idle_ranks=True))
    first = plan.rounds[0].groups[-1]
    assert first.algo == IDLE
    bad = replace(plan, rounds=(replace(plan.rounds[0], groups=plan.rounds[0].groups[:-1]
                                        + (replace(first, samples=(0,)),)),))
    with pytest.raises(InvalidPlanError, match="idle group holds no samples"):
        validate_plan(bad, [5000], cost, priced=True)


def test_thorough_search_plans_a_large_batch_as_a_small_problem_would_be_planned(monkeypatch):
    """`SolverConfig.thorough_search` gives a batch above the small-problem size (32 samples x 16 ranks)
    the search small problems get: the plan equals the one planned with that size raised past the batch,
    and differs from the fast search's."""
    cost = a3_scenario(shard_ranks=16)
    config = SolverConfig(16, ranks_per_node=cost.ranks_per_node)
    lengths, patches = (a.tolist() for a in draw_lengths("imagevideo", 32, seed=1))
    assert len(lengths) * config.num_ranks > planner._SMALL_PROBLEM
    fast = plan_batch(lengths, cost, config, patches=patches)
    thorough = plan_batch(lengths, cost, replace(config, thorough_search=True), patches=patches)
    validate_plan(thorough, lengths, cost, patches=patches, priced=True)
    monkeypatch.setattr(planner, "_SMALL_PROBLEM", len(lengths) * config.num_ranks)
    assert thorough.digest() == plan_batch(lengths, cost, config, patches=patches).digest()
    assert thorough.digest() != fast.digest()
