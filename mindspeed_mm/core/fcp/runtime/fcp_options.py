"""The FCP options of a run as one typed object, and what they build: cost model, solver config, planner, plan source.

One field per row of the options table (`mindspeed_mm_fcp.options.FCP_OPTIONS`, without the `fcp_` prefix),
with its default and checks. The three fronts build it from their own input and then plan the same way:

- MindSpeed-MM: `FCPOptions.from_namespace(args)` (the `--fcp-*` flags after validation);
- `fcp train`: the `gpt_args` section of its YAML is read into this class;
- the planning CLI (`fcp plan`, `fcp simulate`): `FCPOptions.from_cli(args)` (`--preset`, `--max-degree`, ...).

From there: `cost_model(...)` -> `solver_config(...)` -> `batch_planner(...)` -> `plan_source(...)`.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from mindspeed_mm.core.fcp.cost import ALGOS, CostModel
from mindspeed_mm.core.fcp.cost.builder import build_cost_model
from mindspeed_mm.core.fcp.cost.communicator_memory import framework_communicators
from mindspeed_mm.core.fcp.cost.model import HYBRID
from mindspeed_mm.core.fcp.runtime.batch_planner import BatchPlanner
from mindspeed_mm.core.fcp.solver import SolverConfig
from mindspeed_mm.core.fcp.solver.communicators import default_budget, group_catalogue
from mindspeed_mm.core.fcp.solver.plan import AUTO, LOCKSTEP
from mindspeed_mm_fcp.options import FCP_OPTIONS, OPTIONS_BY_DEST, coerce_option

if TYPE_CHECKING:  # the training side imports torch; the planning commands (`fcp plan`) import none of it
    from mindspeed_mm.core.fcp.runtime.plan_source import StepPlanSource
    from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
    from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRuntimeSettings

def _option(dest: str) -> Any:
    """A field for the option `dest`: default from the options table; `key` (the YAML key) in its metadata."""
    return field(default=OPTIONS_BY_DEST[dest].default, metadata={"key": dest, "fcp_option": True})


@dataclass(frozen=True)
class FCPOptions:
    """The `fcp_*` options of a run (defaults and checks: `mindspeed_mm_fcp.options`)."""

    profile_table: str | None = _option("fcp_profile_table")
    """Profile table measured by `fcp profile`; wins over `preset`."""
    preset: str | None = _option("fcp_preset")
    """Analytic cost preset, used when there is no profile table."""
    max_degree: int | None = _option("fcp_max_degree")
    """Largest CP group; None: all FCP ranks."""
    max_tokens_per_rank: int | None = _option("fcp_max_tokens_per_rank")
    """Lowers the cost model's memory limit in tokens per rank."""
    attention_algo: str = _option("fcp_attention_algo")
    """`auto` (ring, Ulysses or hybrid per group by cost), `ring` or `ulysses`."""
    attention_kernel: str = _option("fcp_attention_kernel")
    """Local attention kernel (`auto`: by device)."""
    async_planning: bool = _option("fcp_async_planning")
    """Plan step t+1 in a background thread while step t runs."""
    group_pool: str = _option("fcp_group_pool")
    """`lazy` or `prewarm` creation of the CP groups."""
    communicator_budget: int | None = _option("fcp_communicator_budget")
    """Communicators one rank may join; None: ceil(log2 N) + 4 (`SolverConfig.communicator_budget`)."""
    ranks_per_node: int | None = _option("fcp_ranks_per_node")
    """Ranks sharing a node's fast link; None: the cost source's."""
    log_plan: bool = _option("fcp_log_plan")
    """Log every step's plan and calibration."""
    recalibrate: bool = _option("fcp_recalibrate")
    """Correct the cost model from the measured group times of earlier steps."""
    recalibration_smoothing: float = _option("fcp_recalibration_smoothing")
    """Weight of the newest measurement in the correction factors, in (0, 1]."""
    comm_timeout_s: float = _option("fcp_comm_timeout_s")
    """Bound of every exchange on an FCP group, in seconds."""

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "FCPOptions":
        """The options given as `{dest: value}` (`fcp_max_degree: 8`); missing ones take their default.

        Every value goes through the option's own parse and checks (`coerce_option`)."""
        unknown = sorted(set(values) - set(OPTIONS_BY_DEST))
        if unknown:
            raise ValueError(f"unknown FCP option {unknown[0]!r}")
        return cls(**{f.name: coerce_option(f.metadata["key"], values.get(f.metadata["key"]))
                      for f in dataclasses.fields(cls)})

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> "FCPOptions":
        """The `--fcp-*` options of a MindSpeed / Megatron argument namespace."""
        return cls.from_values({o.dest: getattr(args, o.dest, None) for o in FCP_OPTIONS})

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> "FCPOptions":
        """The options the planning CLI registered under their CLI flags (`--preset`, `--max-degree`, ...)."""
        values = {o.dest: getattr(args, o.cli_dest, None) for o in FCP_OPTIONS if o.cli_flag is not None}
        return cls.from_values({dest: str(value) if isinstance(value, PurePath) else value
                                for dest, value in values.items()})

    @property
    def algos(self) -> tuple[str, ...]:
        """The attention algorithms plans may use."""
        return ALGOS if self.attention_algo == "auto" else (self.attention_algo,)

    def cost_model(self, *, num_ranks: int | None, tp: int = 1, pp: int = 1,
                   algos: Sequence[str] | None = None, vision_frozen: bool = False,
                   step_semantics: str = LOCKSTEP, expert_parallel: int = 1) -> CostModel:
        """The cost model of the profile table, else of the preset (its model state sharded over the `num_ranks`
        FCP ranks, at tensor / pipeline sizes `tp` / `pp`); `algos` restricts the algorithms (default: `algos`);
        `vision_frozen`: the run does not train the vision tower; `expert_parallel`: ranks the run splits a
        mixture-of-experts model's experts over. With `num_ranks` known, the memory limit sets aside the buffers of
        the communicators a rank may hold (`cost.communicator_memory`): the FCP groups its plans (`step_semantics`)
        may use within the budget and MindSpeed / Megatron's."""
        algos = self.algos if algos is None else tuple(algos)
        communicators = None
        if num_ranks is not None:
            block = self.hybrid_block(expert_parallel=expert_parallel) if HYBRID in algos else 0
            catalogue = group_catalogue(num_ranks, min(self.max_degree or num_ranks, num_ranks),
                                        self.communicator_budget or default_budget(num_ranks), algos,
                                        plane=step_semantics == LOCKSTEP, hybrid_block=block)
            communicators = (catalogue.worst, framework_communicators(num_ranks, tp, pp))
        return build_cost_model(
            preset=self.preset, profile_table=self.profile_table, max_tokens_per_rank=self.max_tokens_per_rank,
            algos=algos, shard_ranks=num_ranks, ranks_per_node=self.ranks_per_node, tp=tp, pp=pp,
            vision_frozen=vision_frozen, expert_parallel=expert_parallel, communicators=communicators,
        )

    def solver_config(self, *, num_ranks: int, cost: CostModel, step_semantics: str = LOCKSTEP,
                      allow_idle_ranks: bool = False) -> SolverConfig:
        """The solver's view of the cluster: `num_ranks` FCP ranks, the node size (this run's or the cost
        source's), the largest degree, the communicator budget."""
        return SolverConfig(num_ranks=num_ranks, ranks_per_node=self.ranks_per_node or cost.ranks_per_node,
                            max_degree=self.max_degree,
                            allow_idle_ranks=allow_idle_ranks, step_semantics=step_semantics,
                            communicator_budget=self.communicator_budget or AUTO)

    def batch_planner(self, *, num_ranks: int, step_semantics: str = LOCKSTEP, tp: int = 1, pp: int = 1,
                      static_cp_degree: int | None = None, vision_frozen: bool = False,
                      expert_parallel: int = 1) -> BatchPlanner:
        """The planner of one global batch; `static_cp_degree` plans Megatron's static ring CP instead of FCP."""
        cost = self.cost_model(num_ranks=num_ranks, tp=tp, pp=pp,
                               algos=None if static_cp_degree is None else ("ring",), vision_frozen=vision_frozen,
                               step_semantics=step_semantics, expert_parallel=expert_parallel)
        return BatchPlanner(cost=cost, solver_config=self.solver_config(num_ranks=num_ranks, cost=cost,
                                                                         step_semantics=step_semantics),
                            static_cp_degree=static_cp_degree)

    def plan_source(self, planner: BatchPlanner, batch_lengths: Callable[[int], Sequence[int]], steps: "RunSteps", *,
                    batch_patches: Callable[[int], Sequence[int] | None] | None = None,
                    log: logging.Logger | None = None,
                    calibration: Mapping[str, Any] | None = None) -> "StepPlanSource":
        """The plan source of the run's `steps`: look-ahead planning, plan logging and recalibration as these
        options say.

        `calibration`: the recalibrator's state saved by the run this one resumes (`StepRecalibrator.to_json`)."""
        from mindspeed_mm.core.fcp.cost.calibration import CalibrationSettings
        from mindspeed_mm.core.fcp.runtime.plan_source import StepPlanSource
        from mindspeed_mm.core.fcp.runtime.recalibration import StepRecalibrator

        recalibrator = None
        if self.recalibrate:
            recalibrator = StepRecalibrator(planner.cost, CalibrationSettings(smoothing=self.recalibration_smoothing))
            if calibration is not None:
                recalibrator.restore(calibration)
        return StepPlanSource(planner, batch_lengths, steps, async_planning=self.async_planning,
                              log_plan=self.log_plan, recalibrator=recalibrator, batch_patches=batch_patches,
                              logger=log)

    def runtime_settings(self, *, step_semantics: str = LOCKSTEP, expert_parallel: int = 1) -> "FCPRuntimeSettings":
        """What the step runtime needs (its catalogue of groups is the planner's of `step_semantics`, with the
        hybrid split of the cost source's heads and nodes)."""
        from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRuntimeSettings

        return FCPRuntimeSettings(group_pool=self.group_pool, max_degree=self.max_degree,
                                  communicator_budget=self.communicator_budget or AUTO, algos=self.algos,
                                  plane_group=step_semantics == LOCKSTEP, comm_timeout_s=self.comm_timeout_s,
                                  attention_kernel=self.attention_kernel, log_plan=self.log_plan,
                                  hybrid_block=self.hybrid_block(expert_parallel=expert_parallel))

    def hybrid_block(self, *, expert_parallel: int = 1) -> int:
        """The largest block of the run's hybrid groups (`CostModel.hybrid_rule`); 0 when plans run none."""
        if HYBRID not in self.algos:
            return 0
        return self.cost_model(num_ranks=None, expert_parallel=expert_parallel).hybrid_rule.block


__all__ = ["FCPOptions"]
