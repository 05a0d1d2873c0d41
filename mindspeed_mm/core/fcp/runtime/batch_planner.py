"""The planner of one global batch: the FCP solver, or Megatron's static ring CP (`FCPOptions.batch_planner`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.baselines import megatron_static_cp
from mindspeed_mm.core.fcp.solver.planner import plan_batch


@dataclass(frozen=True)
class BatchPlanner:
    """Plans one global batch from its sample lengths; deterministic, so every rank gets the same plan."""

    cost: CostModel
    """Time and memory model the plans are built and checked with."""
    solver_config: SolverConfig
    """Ranks, ranks per node and maximum degree."""
    static_cp_degree: int | None
    """None plans with FCP; otherwise Megatron's static ring CP of this degree (DP = N / degree)."""

    def plan(self, lengths: Sequence[int], patches: Sequence[int] | None = None) -> Plan:
        """The plan of a global batch whose samples have these token lengths (and vision-encoder patches)."""
        if self.static_cp_degree is None:
            return plan_batch(lengths, self.cost, self.solver_config, patches=patches)
        return megatron_static_cp(
            lengths, self.cost, self.solver_config, patches=patches, cp_degree=self.static_cp_degree
        )
