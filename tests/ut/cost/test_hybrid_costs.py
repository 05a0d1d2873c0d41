"""Hybrid Ulysses x ring pricing: it reduces to the ring at u = 1 and to Ulysses at r = 1, term for term; its
per-rank attention is the H200's measured Ulysses attention of a head share (part U of the device data) over a
ring step's block; its splits keep blocks inside nodes where a group is placed; the model picks the fastest."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable, WorkloadColumns
from mindspeed_mm.core.fcp.cost.hybrid_costs import rank_blocks
from mindspeed_mm.core.fcp.cost.measured_compute import load_rows
from mindspeed_mm.core.fcp.cost.presets import build_preset_table
from test_cost_device_data import HELD_OUT_GAPS, _device_file

# The Ulysses term's bound held out (its rule has no per-degree constant; test_cost_device_data names the gap).
MAX_MEAN_ERROR = HELD_OUT_GAPS["Ulysses attention per degree (U)"][0]

DEGREES = np.arange(1, 65)
BATCHES = ([30000, 8000, 2000], [2000] * 40, [120000], [700, 90])


def _tables() -> dict[str, ProfileTable]:
    """The 8B presets (affine links; measured compute on the H200), the CPU one (transfers half hidden), and the
    A3 one with an off-diagonal grid of its own and all-to-all / p2p curves per group size (interpolated)."""
    a3 = build_preset_table("a3", "qwen3vl-8b")
    tm = a3.time
    profiled = dataclasses.replace(a3, time=dataclasses.replace(
        tm, attention_off_diagonal_ms=dataclasses.replace(tm.attention_causal_ms, y=tuple(
            1.3 * y for y in tm.attention_causal_ms.y)),
        p2p_by_group_size_ms={2: tm.p2p_intra_ms, 8: tm.p2p_inter_ms},
        all_to_all_by_group_size_ms={2: tm.all_to_all_intra_ms, 16: tm.all_to_all_inter_ms}))
    return {"a3": a3, "h200": build_preset_table("h200", "qwen3vl-8b"), "cpu": build_preset_table("cpu", "tiny"),
            "a3-profiled": profiled}


@pytest.mark.parametrize("name", ["a3", "h200", "cpu", "a3-profiled"])
@pytest.mark.parametrize("node_part", [None, 4, 8])
def test_one_rank_blocks_are_the_ring_and_one_block_is_ulysses(name: str, node_part: int | None) -> None:
    table = _tables()[name]
    both = CostModel(table, memory_limited=False)
    hybrid = CostModel(table, memory_limited=False, algos=("hybrid",))
    for lengths in BATCHES:
        work = both.workload([max(1, x // (50 if name == "cpu" else 1)) for x in lengths])
        ring = both.group_time_ms(work, DEGREES, "ring", node_part=node_part)
        as_ring = hybrid.group_time_ms(work, DEGREES, "hybrid", node_part=node_part, ulysses_degree=1)
        np.testing.assert_allclose(as_ring, ring, rtol=1e-12)
        for degree in hybrid.hybrid_ulysses_degrees:
            ulysses = both.group_time_ms(work, degree, "ulysses", node_part=node_part)
            as_ulysses = hybrid.group_time_ms(work, degree, "hybrid", node_part=node_part, ulysses_degree=degree)
            if node_part is None or degree <= node_part:   # one block is Ulysses inside a node
                np.testing.assert_allclose(as_ulysses, ulysses, rtol=1e-12)
            else:   # hybrid never runs an all-to-all across nodes
                assert np.isinf(as_ulysses)


def test_a_rank_attends_its_head_share_as_the_device_measured_it() -> None:
    """Part U of the H200 data: 32 / u query heads over a whole document of s tokens on one rank. A hybrid step
    on a block of s tokens is that call (the diagonal block of a ring step; r = 1: the whole document), so the
    h200 preset's hybrid block at u is as close to those rows on average as the Ulysses term itself, held out."""
    _, rows = load_rows(_device_file())
    table = build_preset_table("h200", "qwen3vl-8b", recompute="none")
    c = CostModel(table).coefficients
    layers = table.layers_per_stage
    errors = []
    for row in (r for r in rows if r.part == "U"):
        u, s = row.fields["degree"], float(row.fields["length"])
        alpha, beta, gamma = rank_blocks(c, u).diagonal
        predicted = max(c.attention_call_ms, alpha * s * s + beta * s + gamma) / layers
        errors.append(predicted / row.fields["fb_ms"] - 1)
    assert len(errors) == 10
    print(f"hybrid block vs part U: mean |error| {100 * np.mean(np.abs(errors)):.1f}%, worst {100 * max(errors, key=abs):+.1f}%")
    assert np.mean(np.abs(errors)) <= MAX_MEAN_ERROR
    # The test tells a wrong share from the right one: every head on every rank is far off the rows of u >= 2.
    alpha, beta, gamma = rank_blocks(c, 1).diagonal
    all_heads = [max(c.attention_call_ms, alpha * s * s + beta * s + gamma) / layers / r.fields["fb_ms"] - 1
                 for r in rows if r.part == "U" and r.fields["degree"] >= 2 for s in [float(r.fields["length"])]]
    assert np.mean(np.abs(all_heads)) > 3 * MAX_MEAN_ERROR


def test_blocks_sit_inside_nodes_where_the_group_is_placed() -> None:
    cost = CostModel.from_preset("a3-qwen3vl-8b")   # 16 ranks per node, 32 heads, 8 KV heads
    work = [cost.workload([60000, 9000])]
    # Compact: a group of 24 spans two nodes; blocks of 16 would not divide it, blocks of 8 align with nodes.
    assert cost.hybrid_splits(work, [24], [None]).tolist() == [8]
    # Placed 8 + 16: blocks of 8 align; placed 6 + 16 + 2 (starting at rank 10) they would not, and 24's one proper
    # split is 8 x 3 (`HybridSplitRule`): no hybrid group there.
    assert cost.hybrid_splits(work, [24], [8]).tolist() == [8]
    assert cost.hybrid_splits(work, [24], [2]).tolist() == [0]
    # A group of 6 inside a node splits its heads over 2 (6 does not divide 32); across a node boundary at
    # 3 + 3 no block of 2 stays inside a node.
    assert cost.hybrid_splits(work, [6], [None]).tolist() == [2]
    assert cost.hybrid_splits(work, [6], [3]).tolist() == [0]
    assert np.isinf(cost.group_time_ms(work[0], 6, "hybrid", node_part=3))
    # Above the heads: 64 = 16 x 4 (a block per node).
    assert cost.hybrid_splits(work, [64], [None]).tolist() == [16]


def test_beside_ring_and_ulysses_hybrid_takes_the_degrees_they_cannot_serve_in_a_node() -> None:
    auto = CostModel.from_preset("a3-qwen3vl-8b")
    work = auto.workload([60000, 9000])
    priced = [int(d) for d in DEGREES if np.isfinite(auto.group_time_ms(work, int(d), "hybrid"))]
    # Not 1, 2, 4, 8, 16 (Ulysses inside a node), nor odd degrees (no head split); from 18 on they span nodes.
    assert priced[:8] == [6, 10, 12, 14, 18, 20, 22, 24] and 64 in priced and 16 not in priced
    assert all(auto.runs_at("hybrid", d) == (d in priced) for d in range(1, 65))
    forced = CostModel.from_preset("a3-qwen3vl-8b", algos=("hybrid",))
    assert np.isfinite(forced.group_time_ms(forced.workload([6000]), 1, "hybrid")) and forced.runs_at("hybrid", 16)
    with_ring = CostModel.from_preset("a3-qwen3vl-8b", algos=("ring", "hybrid"))
    # Beside the ring alone, hybrid keeps Ulysses' splits: 16 = 16 x 1.
    assert with_ring.hybrid_splits([work], [16], [None]).tolist() == [16]


def test_the_chosen_split_is_the_fastest_priced_one() -> None:
    cost = CostModel.from_preset("h200-qwen3vl-8b")
    rng = np.random.default_rng(3)
    workloads = [cost.workload(rng.integers(100, 40000, rng.integers(1, 12)).tolist()) for _ in range(40)]
    degrees = rng.choice([6, 12, 16, 24, 32, 48, 64], 40)
    splits = cost.hybrid_splits(workloads, degrees, [None] * 40)
    table = cost.group_time_table(WorkloadColumns.stack(workloads), degrees[:, None], "hybrid")[:, 0]
    for work, degree, u, best in zip(workloads, degrees.tolist(), splits.tolist(), table.tolist()):
        candidates = [k for k in (2, 4, 8) if degree % k == 0]
        times = [cost.group_time_ms(work, degree, "hybrid", ulysses_degree=k) for k in candidates]
        assert u in candidates and best == pytest.approx(min(times), rel=1e-12)
        assert cost.group_time_ms(work, degree, "hybrid", ulysses_degree=u) == pytest.approx(best, rel=1e-12)
