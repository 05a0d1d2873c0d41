"""FCP planner: splits the FCP ranks into context-parallel groups for every global batch."""
from mindspeed_mm.core.fcp.solver.errors import InfeasibleSampleError, InvalidPlanError
from mindspeed_mm.core.fcp.solver.exact import ExactResult, solve_exact
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, Plan, RoundPlan, SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.planner import plan_batch

__all__ = [
    "ExactResult",
    "GroupPlan",
    "InfeasibleSampleError",
    "InvalidPlanError",
    "Plan",
    "RoundPlan",
    "SolverConfig",
    "plan_batch",
    "solve_exact",
    "validate_plan",
]
