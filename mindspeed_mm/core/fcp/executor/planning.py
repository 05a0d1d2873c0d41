"""Which planner lays out each global batch: the FCP solver, or Megatron's static ring CP."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mindspeed_mm.core.fcp.cost import ALGOS, CostModel
from mindspeed_mm.core.fcp.cost.builder import build_cost_model
from mindspeed_mm.core.fcp.executor.config import RunConfig
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.baselines import megatron_static_cp
from mindspeed_mm.core.fcp.solver.plan import INDEPENDENT
from mindspeed_mm.core.fcp.solver.planner import plan_batch


def run_cost_model(config: RunConfig, num_ranks: int | None = None) -> CostModel:
    """The cost model named by `fcp_preset` or `fcp_profile_table`, restricted to the allowed algos.

    A preset shards the model state over the run's `num_ranks` FCP ranks (its memory limit is that of
    the real run; None: the preset's default, one node) and takes `fcp_ranks_per_node` as its node
    size, as `fcp plan` does with --ranks and --ranks-per-node."""
    fcp = config.fcp
    if not config.is_fcp:
        algos: tuple[str, ...] = ("ring",)
    elif fcp.attention_algo == "auto":
        algos = ALGOS
    else:
        algos = (fcp.attention_algo,)
    return build_cost_model(preset=fcp.preset, profile_table=fcp.profile_table if fcp.preset is None else None,
                            max_tokens_per_rank=fcp.max_tokens_per_rank, algos=algos, shard_ranks=num_ranks,
                            ranks_per_node=fcp.ranks_per_node if fcp.preset is not None else None)


@dataclass(frozen=True)
class BatchPlanner:
    """Plans one global batch from its sample lengths; deterministic, so every rank gets the same plan."""

    cost: CostModel
    """Time and memory model the plans are built and checked with."""
    solver_config: SolverConfig
    """Ranks, ranks per node and maximum degree."""
    static_cp_degree: int | None
    """None plans with FCP; otherwise Megatron's static ring CP of this degree (DP = N / degree)."""

    @classmethod
    def from_config(cls, config: RunConfig, num_ranks: int) -> "BatchPlanner":
        """The planner of a run on `num_ranks` FCP ranks."""
        config.validate_world(num_ranks)
        cost = run_cost_model(config, num_ranks)
        # `fcp train` all-reduces the gradients once per step, so each group waits only for its own
        # members and an idle rank just moves on (`RoundRunner`): plan for that.
        solver_config = SolverConfig(
            num_ranks=num_ranks,
            ranks_per_node=config.fcp.ranks_per_node or cost.ranks_per_node,
            max_degree=config.fcp.max_degree,
            step_semantics=INDEPENDENT,
        )
        static = None if config.is_fcp else config.training.context_parallel_size
        return cls(cost=cost, solver_config=solver_config, static_cp_degree=static)

    def plan(self, lengths: Sequence[int], patches: Sequence[int] | None = None) -> Plan:
        """The plan of a global batch whose samples have these token lengths (and vision-encoder patches)."""
        if self.static_cp_degree is None:
            return plan_batch(lengths, self.cost, self.solver_config, patches=patches)
        return megatron_static_cp(
            lengths, self.cost, self.solver_config, patches=patches, cp_degree=self.static_cp_degree
        )
