"""Packings of independent replicas (`solver.replica_balance`): every sample once, within capacity, priced as
the cost model prices the micro-batch, and moves that only ever shorten the busiest replica."""
from __future__ import annotations

import numpy as np
import pytest

from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver.replica_balance import marginal_packing, rebalanced
from mindspeed_mm.core.fcp.solver.static_layout import StaticPacker, dealt_to_replicas
from scenario_costs import a3_scenario


def _check(packs, dealt, packer, cost, lengths) -> float:
    bins = len(packs.pack_ms)
    assert sorted(k for mine in dealt for k in mine) == list(range(bins))
    assert np.array_equal(np.bincount(packs.bin_of, minlength=bins) > 0, np.ones(bins, dtype=bool))
    tokens = np.bincount(packs.bin_of, weights=lengths, minlength=bins)
    assert tokens.max() <= packs.degree * cost.capacity_tokens
    sums = packer.columns.group_sums(np.arange(lengths.size), packs.bin_of, bins)
    np.testing.assert_allclose(sums.values, packs.workloads.values)
    priced = cost.group_time_table(sums, np.full((bins, 1), packs.degree), packs.algo)[:, 0]
    np.testing.assert_allclose(priced, packs.pack_ms, rtol=1e-9)
    return max(sum(packs.pack_ms[k] for k in mine) for mine in dealt)


@pytest.mark.parametrize(("workload", "seed", "degree", "algo"), [
    ("internvid", 0, 4, "ulysses"), ("openvid", 1, 2, "ring"), ("bimodal", 2, 8, "ulysses"), ("msrvtt", 3, 1, "ring")])
def test_packings_place_every_sample_once_within_capacity_and_priced(workload, seed, degree, algo) -> None:
    cost = a3_scenario(shard_ranks=32)
    lengths, patches = draw_lengths(workload, 96, seed)
    packer = StaticPacker(lengths, patches.tolist(), cost)
    replicas = 32 // degree
    marginal = _check(*marginal_packing(packer.columns, lengths, cost, degree, algo, replicas), packer, cost, lengths)
    shared = packer.packs(degree, algo, replicas)
    dealt = dealt_to_replicas(shared, replicas)
    before = _check(shared, dealt, packer, cost, lengths)
    after = _check(*rebalanced(shared, dealt, packer.columns, lengths, cost), packer, cost, lengths)
    assert after <= before * (1 + 1e-12)
    print(f"{workload}: busiest replica shared {before:.0f}, rebalanced {after:.0f}, marginal {marginal:.0f} ms")
