"""FCP planner: splits the FCP ranks into context-parallel groups for every global batch."""
from mindspeed_mm.core.fcp.solver.errors import InfeasibleSampleError, InvalidPlanError
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, Plan, RoundPlan, SolverConfig, validate_plan

__all__ = [
    "GroupPlan",
    "InfeasibleSampleError",
    "InvalidPlanError",
    "Plan",
    "RoundPlan",
    "SolverConfig",
    "validate_plan",
]
