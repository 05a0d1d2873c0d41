"""Baseline strategies: layouts on hand-made batches, feasibility rules, and valid plans on random batches."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.workloads import generate_samples
from mindspeed_mm.core.fcp.solver import InfeasibleSampleError, SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.baselines import (
    BASELINES,
    BaselineInfeasibleError,
    deepspeed_ulysses,
    get_baseline,
    mcore_dynamic_cp,
    megatron_static_cp,
    mindspeed_dp_cp_switch,
    static_cp_degree,
)
from scenario_costs import a3_scenario


def _tiny(heads: int = 32, kv_heads: int = 8) -> CostModel:
    """An A3 Qwen3-VL-8B cost model whose ranks hold 100 tokens, so hand-made batches exercise the layouts
    (`heads` / `kv_heads`: the same table for another head count)."""
    table = a3_scenario().table
    table = dataclasses.replace(table, model=dataclasses.replace(table.model, heads=heads, kv_heads=kv_heads))
    return CostModel(table, max_tokens_per_rank=100)


def _layout(plan) -> list[list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Per round: (ranks, samples) of each group."""
    return [[(g.ranks, g.samples) for g in r.groups] for r in plan.rounds]


def test_megatron_spreads_samples_over_replicas_longest_first() -> None:
    cost = _tiny()
    lengths = [150, 150, 50, 50]
    # CP 2 (150 tokens need 2 ranks), DP 2, micro-batches of at most 200 tokens: one round holds
    # the batch; each 150 opens a micro-batch and each 50 joins the lighter one.
    plan = megatron_static_cp(lengths, cost, SolverConfig(num_ranks=4))
    assert plan.extras == {"strategy": "megatron_static_cp", "cp_degree": 2, "dp_degree": 2, "ranks_per_node": 8}
    assert _layout(plan) == [[((0, 1), (0, 2)), ((2, 3), (1, 3))]]
    assert {g.algo for r in plan.rounds for g in r.groups} == {"ring"}
    validate_plan(plan, lengths, cost, priced=True)


def test_megatron_adds_rounds_until_the_micro_batches_hold_the_batch() -> None:
    cost = _tiny()
    lengths = [120, 120, 120, 40]
    # Two micro-batches of 200 tokens cannot hold three 120-token samples: two rounds, and the
    # slowest micro-batches share the first round.
    plan = megatron_static_cp(lengths, cost, SolverConfig(num_ranks=4))
    assert _layout(plan) == [
        [((0, 1), (0,)), ((2, 3), (1,))],
        [((0, 1), (2,)), ((2, 3), (3,))],
    ]
    assert plan.predicted_ms == pytest.approx(sum(r.predicted_ms for r in plan.rounds))
    for r in plan.rounds:
        assert r.predicted_ms == max(g.predicted_ms for g in r.groups)
    validate_plan(plan, lengths, cost, priced=True)


def test_megatron_rejects_a_batch_too_small_for_the_replicas() -> None:
    message = "2 samples cannot give each of the 4 data-parallel replicas a micro-batch in each of 1 rounds"
    with pytest.raises(BaselineInfeasibleError, match=message):
        megatron_static_cp([10, 10], _tiny(), SolverConfig(num_ranks=4))


def test_static_degree_is_the_smallest_divisor_that_holds_the_longest_sample() -> None:
    cost = _tiny()
    assert static_cp_degree(450, cost, SolverConfig(num_ranks=12), "ring") == 6
    assert static_cp_degree(100, cost, SolverConfig(num_ranks=12), "ring") == 1
    with pytest.raises(BaselineInfeasibleError, match="divides 12 ranks"):
        static_cp_degree(450, cost, SolverConfig(num_ranks=12, max_degree=5), "ring")


def test_static_degree_fixed_for_the_run_is_used_even_if_the_batch_is_short() -> None:
    cost = _tiny()
    plan = megatron_static_cp([50] * 8, cost, SolverConfig(num_ranks=8), cp_degree=4)
    assert plan.extras == {"strategy": "megatron_static_cp", "cp_degree": 4, "dp_degree": 2, "ranks_per_node": 8}
    assert all(g.degree == 4 for r in plan.rounds for g in r.groups)
    with pytest.raises(BaselineInfeasibleError, match="CP degree 3 must divide 8 ranks"):
        megatron_static_cp([50] * 8, cost, SolverConfig(num_ranks=8), cp_degree=3)
    with pytest.raises(BaselineInfeasibleError, match="sample 1 \\(250 tokens\\) does not fit CP degree 2"):
        megatron_static_cp([50, 250], cost, SolverConfig(num_ranks=8), cp_degree=2)


def test_ulysses_degree_must_divide_the_heads() -> None:
    # 250 tokens need 3 ranks; on 8 ranks the smallest degree dividing them is 4, and Qwen3-VL-8B's
    # 32 heads (8 KV heads) split 4 ways.
    assert deepspeed_ulysses([250] + [10] * 7, _tiny(), SolverConfig(num_ranks=8)).extras["cp_degree"] == 4
    # 28 heads and 4 KV heads (InternVL3-8B's): on 6 ranks neither 3 nor 6 can split them.
    heads28 = _tiny(heads=28, kv_heads=4)
    with pytest.raises(BaselineInfeasibleError, match="Ulysses supports"):
        deepspeed_ulysses([250] + [10] * 5, heads28, SolverConfig(num_ranks=6))
    with pytest.raises(BaselineInfeasibleError, match="Ulysses cannot split the attention heads over 3"):
        deepspeed_ulysses([50] * 6, heads28, SolverConfig(num_ranks=6), cp_degree=3)
    # Ring CP has no such limit.
    assert megatron_static_cp([250] + [10] * 5, heads28, SolverConfig(num_ranks=6)).extras["cp_degree"] == 3


def test_mindspeed_switch_chooses_the_degree_per_batch() -> None:
    cost = _tiny()
    config = SolverConfig(num_ranks=8)
    short = mindspeed_dp_cp_switch([60] * 16, cost, config)
    long = mindspeed_dp_cp_switch([60] * 15 + [390], cost, config)
    assert (short.extras["cp_degree"], long.extras["cp_degree"]) == (1, 4)
    assert _layout(long) == _layout(megatron_static_cp([60] * 15 + [390], cost, config, cp_degree=4))
    with pytest.raises(ValueError, match="cp_degree must be None"):
        mindspeed_dp_cp_switch([60] * 16, cost, config, cp_degree=2)


def test_mcore_dynamic_cp_hand_case() -> None:
    cost = _tiny()
    lengths = [350, 150, 80, 60, 50]
    plan = mcore_dynamic_cp(lengths, cost, SolverConfig(num_ranks=4))
    # Round 0: the 4-rank sample alone. Round 1: 150 on two ranks, 80 and 60 on one each; 50 fits
    # beside neither. Round 2: 50 alone, its group doubled twice to occupy the idle ranks.
    assert _layout(plan) == [
        [((0, 1, 2, 3), (0,))],
        [((0, 1), (1,)), ((2,), (2,)), ((3,), (3,))],
        [((0, 1, 2, 3), (4,))],
    ]
    validate_plan(plan, lengths, cost, priced=True)


def test_mcore_dynamic_cp_packs_short_samples_into_the_least_loaded_group() -> None:
    cost = _tiny()
    plan = mcore_dynamic_cp([40, 30, 20, 10], cost, SolverConfig(num_ranks=2))
    # 40 and 30 open groups; 20 joins the lighter (30) group, 10 then joins the 40 group.
    assert _layout(plan) == [[((0,), (0, 3)), ((1,), (1, 2))]]


def test_mcore_dynamic_cp_needs_power_of_two_ranks_and_degrees() -> None:
    cost = _tiny()
    with pytest.raises(BaselineInfeasibleError, match="cannot tile 6 ranks"):
        mcore_dynamic_cp([10] * 6, cost, SolverConfig(num_ranks=6))
    with pytest.raises(BaselineInfeasibleError, match="sample 0 \\(500 tokens\\) needs a power-of-two degree 8"):
        mcore_dynamic_cp([500], cost, SolverConfig(num_ranks=8, max_degree=6))


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baselines_reject_bad_batches(name: str) -> None:
    planner = get_baseline(name).planner
    cost = _tiny()
    config = SolverConfig(num_ranks=4)
    with pytest.raises(ValueError, match="lengths is empty"):
        planner([], cost, config)
    with pytest.raises(ValueError, match="sample 1: length must be a positive integer, got 0"):
        planner([5, 0, 7, 8], cost, config)
    with pytest.raises(InfeasibleSampleError, match="sample 2 \\(length 401 tokens\\)"):
        planner([5, 6, 401, 8], cost, config)


def test_unknown_baseline_name() -> None:
    with pytest.raises(ValueError, match="unknown baseline strategy 'zero'; choose one of megatron_static_cp"):
        get_baseline("zero")


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.parametrize("seed", range(6))
def test_baseline_plans_are_valid_on_random_batches(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    num_ranks = int(rng.choice([4, 8, 16]))
    cost = CostModel.from_preset(
        "a3-qwen3vl-8b", max_tokens_per_rank=int(rng.integers(2_000, 9_000)), ranks_per_node=4
    )
    # A multiple of 16 samples always gives every data-parallel replica a micro-batch in every round.
    samples = generate_samples(["msrvtt", "openvid", "internvid"][seed % 3], 16 * int(rng.integers(1, 6)), seed)
    lengths = np.minimum(samples.lengths, num_ranks * cost.capacity_tokens)
    config = SolverConfig(num_ranks=num_ranks, ranks_per_node=4)
    plan = get_baseline(name).planner(lengths, cost, config, samples.vision_patches)
    validate_plan(plan, lengths, cost, samples.vision_patches, priced=True)
    assert plan.num_ranks == num_ranks
    assert plan.lower_bound_ms <= plan.predicted_ms * (1 + 1e-9)
    if name == "mcore_dynamic_cp":
        for r in plan.rounds:
            for g in r.groups:
                assert g.degree & (g.degree - 1) == 0 and g.ranks[0] % g.degree == 0


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baselines_on_the_qwen3vl_8b_a3_preset(name: str) -> None:
    cost = a3_scenario()
    samples = generate_samples("openvid", 512, seed=0)
    config = SolverConfig(num_ranks=64, ranks_per_node=cost.ranks_per_node)
    plan = get_baseline(name).planner(samples.lengths, cost, config, samples.vision_patches)
    validate_plan(plan, samples.lengths, cost, samples.vision_patches, priced=True)
    assert plan.lower_bound_ms <= plan.predicted_ms
