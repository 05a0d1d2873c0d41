"""Placement: contiguous rank ranges, node-aware, deterministic."""
import numpy as np
import pytest

from mindspeed_mm.core.fcp.solver.placement import compact_node_part, placed_node_part, place_groups, placements


def _ranges(degrees, placement):
    return [tuple(range(s, s + d)) for s, d in zip(placement.starts, degrees)]


def _check(degrees, num_ranks, rpn):
    placement = place_groups(degrees, num_ranks, rpn)
    ranges = _ranges(degrees, placement)
    covered = sorted(r for rng in ranges for r in rng)
    assert covered == list(range(num_ranks))
    straddling = sum(1 for rng, d in zip(ranges, degrees) if d <= rpn and rng[0] // rpn != rng[-1] // rpn)
    assert straddling == placement.straddling
    return placement, ranges


def test_small_groups_stay_inside_nodes():
    # 5 + 3 and 4 + 4 fill two 8-rank nodes exactly; a naive left-to-right layout would split a 4.
    placement, ranges = _check([5, 4, 3, 4], 16, 8)
    assert placement.straddling == 0
    assert ranges == [(0, 1, 2, 3, 4), (8, 9, 10, 11), (5, 6, 7), (12, 13, 14, 15)]


def test_large_groups_take_whole_nodes_first():
    placement, ranges = _check([2, 12, 2], 16, 8)
    assert ranges[1] == tuple(range(12))
    assert placement.straddling == 0
    assert ranges[0] == (12, 13) and ranges[2] == (14, 15)


def test_groups_of_whole_nodes_sit_on_whole_nodes_before_the_others_span_partial_ones():
    # Placed largest first, the 26-rank group would leave the 16-rank one on ranks 26..41 (2 + 8 + 6
    # per node, an emptiest node of 2), where its all-to-all pays the inter-node cost for 6 peers more.
    degrees = [26, 16, 8, 6]
    placement, ranges = _check(degrees, 56, 8)
    assert ranges[1] == tuple(range(16)) and placement.node_parts[1] == 8
    assert ranges[0] == tuple(range(16, 42)) and ranges[2] == tuple(range(48, 56))
    assert placement.straddling == 0
    # A group of several whole nodes never has an emptiest node below the node size.
    rng = np.random.default_rng(11)
    for _ in range(200):
        degrees = [int(x) for x in rng.choice([8, 12, 16, 20, 24, 32], size=int(rng.integers(1, 6)))]
        degrees += [int(x) for x in rng.integers(1, 9, size=int(rng.integers(0, 8)))]
        num_ranks = -(-sum(degrees) // 8) * 8
        degrees += [1] * (num_ranks - sum(degrees))
        placement, _ = _check(degrees, num_ranks, 8)
        assert all(part == 8 for d, part in zip(degrees, placement.node_parts) if d > 8 and d % 8 == 0)


def test_unpackable_sizes_straddle_and_are_counted():
    placement, _ = _check([4, 3, 3, 3, 3], 16, 8)
    assert placement.straddling == 1


def test_partial_last_node():
    placement, _ = _check([3, 2, 1, 4], 10, 4)
    assert placement.straddling == 0


def test_placement_errors():
    with pytest.raises(ValueError, match="num_ranks=8"):
        place_groups([4, 3], 8, 4)
    with pytest.raises(ValueError, match="degrees must be >= 1"):
        place_groups([4, 0, 4], 8, 4)


def test_random_layouts_are_valid_deterministic_and_node_aware():
    rng = np.random.default_rng(5)
    for _ in range(300):
        rpn = int(rng.choice([2, 4, 8, 16]))
        nodes = int(rng.integers(1, 9))
        num_ranks = rpn * nodes
        degrees = []
        while sum(degrees) < num_ranks:
            degrees.append(int(min(rng.integers(1, 2 * rpn + 1), num_ranks - sum(degrees))))
        placement, _ = _check(degrees, num_ranks, rpn)
        assert place_groups(degrees, num_ranks, rpn) == placement
        # Groups that are each a divisor of the node size always pack without straddling.
        if all(rpn % d == 0 for d in degrees):
            assert placement.straddling == 0


def test_thousand_ranks_many_groups():
    degrees = [1] * 600 + [2] * 100 + [8] * 10 + [24] * 4
    degrees += [1] * (1024 - sum(degrees))
    placement, _ = _check(degrees, 1024, 8)
    assert placement.straddling == 0


def test_node_parts_are_the_fewest_ranks_of_a_group_on_one_node():
    assert placed_node_part(0, 8, 8) == 8 and placed_node_part(3, 4, 8) == 4    # inside one node
    assert placed_node_part(6, 4, 8) == 2 and placed_node_part(7, 3, 8) == 1    # across a boundary
    assert placed_node_part(0, 16, 8) == 8 and placed_node_part(0, 12, 8) == 4  # larger than a node
    assert placed_node_part(4, 16, 8) == 4
    placement = place_groups([7, 3, 6], 16, 8)
    assert placement.node_parts == tuple(placed_node_part(s, d, 8) for s, d in zip(placement.starts, [7, 3, 6]))
    assert compact_node_part(3, 8) == 3 and compact_node_part(24, 8) == 8


def test_node_aligned_degrees_use_every_rank_in_powers_of_two():
    from mindspeed_mm.core.fcp.cost import CostModel
    from mindspeed_mm.core.fcp.solver.node_repair import aligned_degrees

    cost = CostModel.from_preset("h100-qwen3vl-8b", shard_ranks=16)
    workloads = [cost.workload([n]) for n in (4346, 4898, 3426)]
    degrees, times, algos = aligned_degrees(cost, workloads, [1, 1, 1], 16, 16, 8)
    assert sum(degrees) == 16 and all(d & (d - 1) == 0 for d in degrees)
    for w, d, t, a in zip(workloads, degrees, times, algos):
        assert t == float(cost.group_time_ms(w, d, a)) == float(cost.best_time_ms(w, np.array([d]))[0][0])
    assert place_groups(degrees, 16, 8).straddling == 0
    assert aligned_degrees(cost, workloads, [1, 1, 1], 12, 12, 6) is None   # node size not a power of two
    assert aligned_degrees(cost, workloads, [8, 8, 1], 16, 16, 8) is None   # aligned degrees exceed the ranks


def test_given_the_times_the_fastest_group_crosses_a_node_boundary():
    # 5 + 5 + 5 + 1 on two nodes of 8: no exact packing, so one 5 must cross the boundary at rank 8.
    degrees = [5, 5, 5, 1]
    by_size = place_groups(degrees, 16, 8)
    assert by_size.straddling == 1 and by_size.starts == (0, 11, 6, 5)   # the smallest (last) 5 crosses
    assert placements(degrees, 16, 8) == (by_size,)
    both = placements(degrees, 16, 8, times=[1.0, 3.0, 5.0, 2.0])
    assert both[0] == by_size and both[1].straddling == 1 and both[1].starts == (0, 6, 11, 5)  # the faster 5
    # The fastest that crosses is the one that crosses by size: one layout.
    assert placements(degrees, 16, 8, times=[1.0, 5.0, 3.0, 2.0]) == (by_size,)
    # Where nothing must cross, the times change nothing.
    assert placements([5, 4, 3, 4], 16, 8, times=[4.0, 3.0, 2.0, 1.0]) == (place_groups([5, 4, 3, 4], 16, 8),)
