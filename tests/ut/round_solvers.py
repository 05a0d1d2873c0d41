"""A `RoundSolver` over real cost-model times, built as the planner's lean search builds it, for the
tests of the round layout."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver import planner
from mindspeed_mm.core.fcp.solver.group_times import GroupTimer, SampleWorkloads
from mindspeed_mm.core.fcp.solver.round_layout import RoundSolver


def lean_round_solver(cost: CostModel, lengths: Sequence[int], patches: Sequence[int] | None, num_ranks: int,
                      uniform_degree: int) -> RoundSolver:
    """The solver of one batch on `num_ranks` ranks, with the lean limits and one uniform group size."""
    mins = np.maximum(1, -(-np.asarray(lengths) // cost.capacity_tokens))
    workloads = SampleWorkloads(cost, lengths, patches)
    timer = GroupTimer(cost, num_ranks)
    facts = planner._sample_facts(lengths, workloads, mins, timer, cost.capacity_tokens, num_ranks)
    limits = replace(planner._LEAN, uniform_degrees=(uniform_degree,))
    return RoundSolver(facts, timer, cost.capacity_tokens, num_ranks, limits)
