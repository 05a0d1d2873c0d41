"""Planning for replicas that meet once per step (`SolverConfig.step_semantics = INDEPENDENT`) and the
static layouts it weighs (`solver.static_layout`)."""
from dataclasses import replace

import numpy as np
import pytest

from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.baselines import BaselineInfeasibleError, static_layout_plan
from mindspeed_mm.core.fcp.solver.plan import IDLE
from mindspeed_mm.core.fcp.solver.static_layout import (
    StaticPacker,
    StaticPacks,
    balanced_bins,
    busiest_replica_ms,
    dealt_to_replicas,
    independent_rounds,
    members_of_bins,
    static_degrees,
)
from mindspeed_mm.core.fcp.solver.step_time import INDEPENDENT, LOCKSTEP, dataflow_ms, step_ms
from scenario_costs import a3_scenario


def _reference_packs(lengths, alone_ms, capacity, replicas):
    """The packing rule written out plainly: per sample (longest time first), the least-loaded
    micro-batch with room, lowest index on ties; one more round when a sample finds no room."""
    order = sorted(range(len(lengths)), key=lambda i: (-alone_ms[i], -lengths[i], i))
    rounds = max(1, -(-(-(-sum(lengths) // capacity)) // replicas))
    while True:
        bins = rounds * replicas
        if bins > len(lengths):
            return None
        load, tokens, packs = [0.0] * bins, [0] * bins, [[] for _ in range(bins)]
        for i in order:
            room = [b for b in range(bins) if tokens[b] + lengths[i] <= capacity]
            if not room:
                break
            b = min(room, key=lambda b: (load[b], b))
            packs[b].append(i)
            load[b] += alone_ms[i]
            tokens[b] += lengths[i]
        else:
            return packs
        rounds += 1


@pytest.mark.parametrize("seed", range(40))
def test_the_static_packer_follows_its_rule(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 60))
    lengths = rng.integers(1, 900, size=n)
    # Few distinct times, so that ties between loads really occur.
    alone = rng.integers(1, 5, size=n).astype(float).tolist()
    capacity = int(rng.integers(int(lengths.max()), 3000))
    replicas = int(rng.integers(1, 5))
    expected = _reference_packs(lengths.tolist(), alone, capacity, replicas)
    if expected is None:
        with pytest.raises(BaselineInfeasibleError, match="data-parallel replicas"):
            balanced_bins(lengths, alone, capacity, replicas)
    else:
        bin_of, bins = balanced_bins(lengths, alone, capacity, replicas)
        assert bins == len(expected)
        assert members_of_bins(bin_of, bins) == tuple(tuple(sorted(p)) for p in expected)


@pytest.mark.parametrize("workload,ranks", [("openvid", 16), ("bimodal", 16), ("imagevideo", 16),
                                            ("internvid", 64), ("bimodal", 64)])
def test_a_plan_for_independent_groups_is_never_slower_than_any_static_layout_or_the_lockstep_plan(workload, ranks):
    cost = a3_scenario(shard_ranks=ranks)
    # Independent groups encode their own media, so the lockstep plan they are weighed against does too.
    lockstep = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node, vision_over_round=False)
    independent = replace(lockstep, step_semantics=INDEPENDENT)
    took_a_static_layout = 0
    for seed in range(3):
        lengths, patches = draw_lengths(workload, 8 * ranks, seed)
        plan = plan_batch(lengths, cost, independent, patches)
        validate_plan(plan, lengths, cost, patches, priced=True)
        mine = step_ms(plan, cost, INDEPENDENT)
        assert mine <= step_ms(plan_batch(lengths, cost, lockstep, patches), cost, INDEPENDENT) * (1 + 1e-12)
        for algo in cost.algos:
            for degree in static_degrees(int(lengths.max()), cost, lockstep, algo):
                try:
                    static = static_layout_plan(lengths, cost, lockstep, patches, cp_degree=degree, algo=algo,
                                                semantics=INDEPENDENT)
                except BaselineInfeasibleError:
                    continue
                assert mine <= step_ms(static, cost, INDEPENDENT) * (1 + 1e-12), (seed, algo, degree)
        took_a_static_layout += "independent_replicas" in plan.extras
    if (workload, ranks) == ("bimodal", 64):
        assert took_a_static_layout, "on bimodal batches at 64 ranks some static replica layout wins"


def test_the_lockstep_plan_is_the_default_and_never_leaves_ranks_idle():
    cost = a3_scenario(shard_ranks=64)
    config = SolverConfig(64, ranks_per_node=cost.ranks_per_node)
    assert config.step_semantics == LOCKSTEP
    lengths, patches = draw_lengths("bimodal", 512, 4)
    plan = plan_batch(lengths, cost, config, patches)
    assert "independent_replicas" not in plan.extras
    assert not any(g.algo == IDLE for r in plan.rounds for g in r.groups)
    assert dataflow_ms(plan) <= plan.predicted_ms * (1 + 1e-12)


def test_an_unknown_step_semantics_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="step_semantics must be one of lockstep, independent"):
        SolverConfig(8, step_semantics="async")
    cost = a3_scenario(shard_ranks=8)
    with pytest.raises(ValueError, match="semantics must be one of"):
        static_layout_plan([100, 200], cost, SolverConfig(8), cp_degree=2, algo="ring", semantics="async")


def test_a_shared_packer_gives_every_layout_the_micro_batches_of_its_own_packing(monkeypatch):
    import mindspeed_mm.core.fcp.solver.static_layout as static_layout
    cost = a3_scenario(shard_ranks=16)
    calls = []
    packing = static_layout.balanced_bins
    monkeypatch.setattr(static_layout, "balanced_bins", lambda *args: calls.append(args[3]) or packing(*args))
    for workload in ("msrvtt", "bimodal"):
        lengths, patches = draw_lengths(workload, 128, 2)
        shared = StaticPacker(lengths, patches, cost)
        calls.clear()
        layouts = 0   # those that hold the batch
        for degree in (1, 2, 4, 8, 16):
            for algo in ("ring", "ulysses"):   # hybrid is not priced on these degrees (Ulysses runs in a node)
                alone = StaticPacker(lengths, patches, cost).alone_ms(degree, algo)
                try:
                    expected = members_of_bins(*packing(lengths, alone.tolist(), degree * cost.capacity_tokens,
                                                        16 // degree))
                except BaselineInfeasibleError as err:
                    with pytest.raises(BaselineInfeasibleError, match=str(err)):
                        shared.packs(degree, algo, 16 // degree)
                    continue
                got = shared.packs(degree, algo, 16 // degree)
                layouts += 1
                assert got.packs == expected
                sums = shared.columns.group_sums(np.concatenate(got.packs), np.repeat(
                    np.arange(len(got.packs)), [len(p) for p in got.packs]), len(got.packs))
                times = cost.group_time_table(sums, np.full((len(got.packs), 1), degree), algo)[:, 0]
                assert got.pack_ms == tuple(times.tolist())
        # Each of the 10 layouts packed once (a packing that cannot hold the batch too, its error kept),
        # but ring and Ulysses on one rank take equal times and share one packing.
        assert np.array_equal(shared.alone_ms(1, "ring"), shared.alone_ms(1, "ulysses"))
        assert len(calls) == 2 * 5 - 1 and layouts == (10 if workload == "msrvtt" else 6)


def test_the_busiest_replica_is_the_dataflow_time_of_compact_blocks_only():
    cost = a3_scenario(shard_ranks=24)
    lengths, patches = draw_lengths("openvid", 192, 1)
    for degree, compact in ((4, True), (8, True), (3, False), (6, False)):
        packs = StaticPacker(lengths, patches, cost).packs(degree, "ring", 24 // degree)
        dealt = dealt_to_replicas(packs, 24 // degree)
        rounds = independent_rounds(packs, 24 // degree, lengths, patches, cost, 8, dealt)
        plan = Plan(rounds=tuple(rounds), predicted_ms=sum(r.predicted_ms for r in rounds), lower_bound_ms=0.0,
                    solver_ms=0.0, num_ranks=24)
        busiest = busiest_replica_ms(packs, dealt, 8)
        if compact:
            assert busiest == pytest.approx(dataflow_ms(plan), rel=1e-12)
        else:   # blocks across a node boundary pay the inter-node cost: only the rounds price them
            assert busiest is None and dataflow_ms(plan) > max(sum(packs.pack_ms[k] for k in m) for m in dealt)


@pytest.mark.parametrize("seed", range(20))
def test_micro_batches_are_dealt_longest_first_to_the_least_loaded_replica(seed):
    rng = np.random.default_rng(seed)
    count, replicas = int(rng.integers(1, 30)), int(rng.integers(1, 8))
    # Few distinct times, so that ties between loads and between micro-batches really occur.
    pack_ms = rng.integers(1, 4, size=count).astype(float).tolist()
    # Each micro-batch holds one or more samples, shuffled: equal times go by the micro-batches' samples.
    bin_of = rng.permutation(np.concatenate([np.arange(count), rng.integers(0, count, size=int(rng.integers(0, 40)))]))
    packs = StaticPacks(2, "ring", bin_of, tuple(pack_ms), None)
    members = members_of_bins(bin_of, count)
    assert packs.packs == members and all(members)
    load, expected = [0.0] * replicas, [[] for _ in range(replicas)]
    for k in sorted(range(count), key=lambda k: (-pack_ms[k], members[k])):
        j = min(range(replicas), key=lambda j: (load[j], j))
        expected[j].append(k)
        load[j] += pack_ms[k]
    assert dealt_to_replicas(packs, replicas) == expected
