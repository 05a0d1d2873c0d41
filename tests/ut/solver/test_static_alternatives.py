"""A plan is never slower than a static DP x CP layout of the same batch: the planner weighs its rounds
against every static layout (`solver.static_alternatives`), the one a tuned static run uses included."""
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.baselines import BaselineInfeasibleError, static_layout_plan
from mindspeed_mm.core.fcp.solver.static_layout import static_degrees
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, step_ms


@pytest.mark.parametrize("preset", ["h200-qwen3vl-8b", "a3-qwen3vl-8b"])
@pytest.mark.parametrize("workload", ["bimodal", "internvid", "openvid"])
def test_no_static_layout_of_the_batch_is_faster_than_the_plan(preset, workload):
    cost = CostModel.from_preset(preset, shard_ranks=64)
    config = SolverConfig(64, ranks_per_node=cost.ranks_per_node)
    lengths, patches = (a.tolist() for a in draw_lengths(workload, 512, 2))
    plan = plan_batch(lengths, cost, config, patches)
    validate_plan(plan, lengths, cost, patches, priced=True)
    fcp_ms = step_ms(plan, cost, LOCKSTEP)
    tried = 0
    for algo in cost.algos:
        for degree in static_degrees(max(lengths), cost, config, algo):
            try:
                static = static_layout_plan(lengths, cost, config, patches, cp_degree=degree, algo=algo,
                                            semantics=LOCKSTEP)
            except BaselineInfeasibleError:
                continue
            tried += 1
            assert fcp_ms <= step_ms(static, cost, LOCKSTEP) * (1 + 1e-9), (algo, degree)
    assert tried >= 4
