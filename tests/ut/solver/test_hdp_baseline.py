"""HDP as modelled: per micro-batch, the static CP group's ranks cut into contiguous ring sub-rings by token count."""
import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.hdp_baseline import hdp_plan, hdp_run, sub_rings
from mindspeed_mm.core.fcp.solver.plan import IDLE


def test_ranks_are_shared_by_tokens_and_memory() -> None:
    lengths = np.array([6000, 3000, 2000, 1000])
    rings = sub_rings([0, 1, 2, 3], lengths, 8, capacity=4000)
    assert sorted(s for ring, _ in rings for s in ring) == [0, 1, 2, 3]
    assert sum(size for _, size in rings) == 8
    size_of = {ring: size for ring, size in rings}
    assert size_of[(0,)] == 4 and size_of[(1,)] == 2 and size_of[(2,)] == 1 and size_of[(3,)] == 1
    # more samples than ranks: sub-rings hold several, still every rank used once
    many = sub_rings(list(range(4)), lengths, 2, capacity=8000)
    assert sum(size for _, size in many) == 2 and sorted(s for ring, _ in many for s in ring) == [0, 1, 2, 3]
    # memory first: a sub-ring never gets fewer ranks than its tokens need
    tight = sub_rings([0, 1], np.array([7000, 100]), 3, capacity=3500)
    assert dict((ring, size) for ring, size in tight)[(0,)] >= 2


def test_plans_are_valid_ring_sub_rings_inside_each_replicas_group() -> None:
    cost = CostModel.from_preset("h200-qwen3vl-8b", shard_ranks=16)
    config = SolverConfig(16, ranks_per_node=8)
    lengths, patches = (a.tolist() for a in draw_lengths("internvid", 128, 0))
    plan = hdp_plan(lengths, cost, config, patches, cp_degree=8)
    validate_plan(plan, lengths, cost, patches, priced=True)
    for round_plan in plan.rounds:
        for g in round_plan.groups:
            assert g.algo in ("ring", IDLE)
            assert g.ranks[0] // 8 == g.ranks[-1] // 8   # inside its replica's CP group of 8
    run = hdp_run([draw_lengths("internvid", 128, s) for s in (0, 1)], cost, config)
    assert run.algo == "ring" and len(run.step_ms) == 2


def test_a_degree_that_does_not_divide_the_ranks_is_refused() -> None:
    cost = CostModel.from_preset("h200-qwen3vl-8b", shard_ranks=16)
    with pytest.raises(ValueError, match="hdp: CP degree 3 must divide 16 ranks"):
        hdp_plan([100] * 16, cost, SolverConfig(16, ranks_per_node=8), cp_degree=3)
