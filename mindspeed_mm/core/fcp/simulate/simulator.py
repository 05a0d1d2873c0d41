"""Strategy simulator: plans K global batches per dataset with FCP and every baseline on one cost model.

For each dataset the same K batches (drawn once from the seeded generator) are planned by every
strategy. A static strategy (Megatron-LM ring CP, DeepSpeed-Ulysses) is configured once for the
whole run at its default degree, the smallest holding the longest sample of all K batches, as a
launch-time CP degree would be; the tuned static strategies take the best (degree, algo) for the
run (`tuned_static`), in lockstep rounds (FSDP) or with independent replicas (DDP); dynamic
strategies choose per batch. Every step adds its own costs where the cost model has them
(`solver.step_time`): lockstep plans run under FSDP, `fcp_ddp` and `tuned_static_ddp` with replicas
that reduce once per step (`fcp_ddp` planned for them: `SolverConfig.step_semantics`). Reported per strategy: predicted iteration time, speedup over
Megatron-LM static CP, ratio to the lower bound and planning time.
"""
from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import WORKLOADS, draw_lengths
from mindspeed_mm.core.fcp.simulate.workloads import DATASETS
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig, validate_plan
from mindspeed_mm.core.fcp.solver.planner import plan_batch
from mindspeed_mm.core.fcp.solver.baselines import (
    BASELINES,
    BaselineInfeasibleError,
    get_baseline,
    static_cp_degree,
)

from mindspeed_mm.core.fcp.solver.hdp_baseline import hdp_run
from mindspeed_mm.core.fcp.solver.mindspeed_mm_runs import upstream_run
from mindspeed_mm.core.fcp.solver.step_time import step_lower_bound_ms, step_ms
from mindspeed_mm.core.fcp.solver.tuned_static import INDEPENDENT, LOCKSTEP, TunedStatic, tune_static

if TYPE_CHECKING:
    from tqdm import tqdm

logger = logging.getLogger(__name__)

FCP = "fcp"
"""Name of the FCP planner among the strategies (its plans run under FSDP, as MindSpeed-MM's Qwen3-VL)."""
FCP_DDP = "fcp_ddp"
"""FCP's plans run with DDP: groups wait only for their own members, one gradient reduction per step."""

TUNED = {"tuned_static_fsdp": LOCKSTEP, "tuned_static_ddp": INDEPENDENT}
"""Tuned static strategies and their execution semantics."""
UPSTREAM = {"mindspeed_mm_sampler": ("mindspeed_mm_sampler", False),
            "mindspeed_mm_sampler_tuned": ("mindspeed_mm_sampler", True),
            "mindspeed_mm_dynamic_batching": ("mindspeed_mm_dynamic_batching", True)}
"""What MindSpeed-MM's Qwen3-VL users run today (`solver.mindspeed_mm_runs`): (run, tuned layout)."""
HDP = "hdp"
"""Huawei's HDP (`solver.hdp_baseline`): sub-rings sized by tokens inside one static CP group, degree tuned."""
STRATEGIES = (FCP, FCP_DDP, *BASELINES, *TUNED, *UPSTREAM, HDP)
"""All strategies the simulator knows, FCP first."""
REFERENCE = "megatron_static_cp"
"""Strategy that speedups are measured against."""


def fcp_counterpart(strategy: str, strategies: Sequence[str]) -> str:
    """The FCP run a strategy is compared with: the one with the same gradient reduction (`fcp_ddp` for
    replicas that reduce once per step, when it is simulated), else `fcp`."""
    if TUNED.get(strategy) == INDEPENDENT and FCP_DDP in strategies:
        return FCP_DDP
    return FCP


@dataclass(frozen=True)
class SimulationConfig:
    """What to simulate."""

    solver: SolverConfig
    """Cluster shape and planner limits shared by all strategies."""
    datasets: tuple[str, ...] = DATASETS
    """Workload generators to draw batches from."""
    strategies: tuple[str, ...] = STRATEGIES
    """Strategies to plan every batch with."""
    num_batches: int = 8
    """K: global batches per dataset."""
    global_batch_size: int = 512
    """Samples per global batch."""
    seed: int = 0
    """Seed of the workload generators; the same seed gives the same batches."""
    validate: bool = True
    """Check every plan with `validate_plan` (memory, coverage, consistency) before counting it."""

    def __post_init__(self) -> None:
        for name in self.datasets:
            if name not in WORKLOADS:
                raise ValueError(f"datasets: unknown dataset {name!r}; choose from {', '.join(WORKLOADS)}")
        for name in self.strategies:
            if name not in STRATEGIES:
                raise ValueError(f"strategies: unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
        if not self.datasets or not self.strategies:
            raise ValueError("datasets and strategies must each name at least one entry")
        if len(set(self.datasets)) != len(self.datasets) or len(set(self.strategies)) != len(self.strategies):
            raise ValueError("datasets and strategies must not repeat an entry")
        if isinstance(self.num_batches, bool) or not isinstance(self.num_batches, int) or self.num_batches <= 0:
            raise ValueError(f"num_batches must be a positive integer, got {self.num_batches!r}")
        if (
            isinstance(self.global_batch_size, bool)
            or not isinstance(self.global_batch_size, int)
            or self.global_batch_size <= 0
        ):
            raise ValueError(f"global_batch_size must be a positive integer, got {self.global_batch_size!r}")


@dataclass(frozen=True)
class StrategyResult:
    """One strategy on one dataset, over the K batches (per-batch tuples are in batch order)."""

    dataset: str
    """Workload the batches came from."""
    strategy: str
    """Strategy name."""
    iteration_ms: tuple[float, ...] = ()
    """Predicted step time of each batch."""
    lower_bound_ms: tuple[float, ...] = ()
    """Lower bound on the step time of each batch (the same for every strategy of one semantics: FSDP
    rounds, or replicas reducing once per step)."""
    solver_ms: tuple[float, ...] = ()
    """Planning wall time of each batch."""
    rounds: tuple[int, ...] = ()
    """Rounds (micro-batches) of each batch."""
    error: str | None = None
    """Why the strategy could not run this workload; None when it ran every batch."""
    extras: dict[str, object] = field(default_factory=dict)
    """Strategy details worth reporting (e.g. the static CP degree)."""

    @property
    def ok(self) -> bool:
        """The strategy planned every batch."""
        return self.error is None

    @property
    def mean_iteration_ms(self) -> float:
        """Mean predicted step time (nan if the strategy did not run)."""
        return float(np.mean(self.iteration_ms)) if self.ok else math.nan

    @property
    def ratio_to_lower_bound(self) -> float:
        """Total predicted time over the total lower bound (1.0 = provably optimal)."""
        return float(sum(self.iteration_ms) / sum(self.lower_bound_ms)) if self.ok else math.nan

    @property
    def solver_ms_p50(self) -> float:
        """Median planning time."""
        return float(np.median(self.solver_ms)) if self.ok else math.nan

    @property
    def solver_ms_max(self) -> float:
        """Longest planning time."""
        return float(np.max(self.solver_ms)) if self.ok else math.nan

    @property
    def mean_rounds(self) -> float:
        """Mean rounds per step."""
        return float(np.mean(self.rounds)) if self.ok else math.nan


@dataclass(frozen=True)
class SimulationReport:
    """Results of a simulation, one entry per (dataset, strategy)."""

    config: SimulationConfig
    """The simulation that produced it."""
    results: tuple[StrategyResult, ...]
    """In dataset order, then strategy order."""

    def result(self, dataset: str, strategy: str) -> StrategyResult:
        """The entry of one dataset and strategy."""
        for r in self.results:
            if r.dataset == dataset and r.strategy == strategy:
                return r
        raise KeyError(f"no result for dataset {dataset!r} and strategy {strategy!r}")

    def speedup(self, dataset: str, strategy: str, over: str = REFERENCE) -> float:
        """Time of `over` divided by time of `strategy` on the same batches (nan if either failed)."""
        base = self._result_or_none(dataset, over)
        this = self._result_or_none(dataset, strategy)
        if base is None or this is None or not (base.ok and this.ok):
            return math.nan
        return sum(base.iteration_ms) / sum(this.iteration_ms)

    def _result_or_none(self, dataset: str, strategy: str) -> StrategyResult | None:
        try:
            return self.result(dataset, strategy)
        except KeyError:
            return None

    def table(self) -> str:
        """Text table: per dataset and strategy, times, speedups, optimality ratio and solver time."""
        headers = ("dataset", "strategy", "iter ms", "rounds", f"vs {REFERENCE}", "FCP speedup", "/ bound", "plan ms")
        rows: list[tuple[str, ...]] = []
        notes: list[str] = []
        for r in self.results:
            if not r.ok:
                rows.append((r.dataset, r.strategy, "n/a", "", "", "", "", ""))
                notes.append(f"{r.dataset} / {r.strategy}: {r.error}")
                continue
            rows.append(
                (
                    r.dataset,
                    r.strategy + _describe_extras(r.extras),
                    f"{r.mean_iteration_ms:,.1f}",
                    f"{r.mean_rounds:.1f}",
                    _format_speedup(self.speedup(r.dataset, r.strategy)),
                    _format_speedup(self.speedup(r.dataset, fcp_counterpart(r.strategy, self.config.strategies),
                                                 over=r.strategy)),
                    f"{r.ratio_to_lower_bound:.3f}",
                    f"{r.solver_ms_p50:.1f}",
                )
            )
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
        lines = [
            "  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))),
            "  ".join("-" * w for w in widths),
        ]
        previous = None
        for row in rows:
            shown = ("" if row[0] == previous else row[0], *row[1:])
            previous = row[0]
            lines.append(
                "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(shown, widths)))
            )
        cfg = self.config
        lines.append("")
        lines.append(
            f"{cfg.num_batches} batches x {cfg.global_batch_size} samples per dataset on {cfg.solver.num_ranks} ranks "
            f"({cfg.solver.ranks_per_node} per node), seed {cfg.seed}; iter ms = mean predicted step time; "
            f"FCP speedup = this strategy's time / FCP's time (fcp_ddp's for tuned_static_ddp); / bound = time / "
            f"lower bound; plan ms = median."
        )
        lines.extend(notes)
        return "\n".join(lines)


def _format_speedup(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}x"


def _describe_extras(extras: dict[str, object]) -> str:
    if "algo" in extras:
        return f" ({extras['algo']} {extras['cp_degree']}, {'tuned' if extras.get('tuned', True) else 'default'})"
    return f" (CP {extras['cp_degree']}, default)" if "cp_degree" in extras else ""


def _plan_with(
    strategy: str,
    lengths: np.ndarray,
    patches: np.ndarray,
    cost: CostModel,
    config: SolverConfig,
    static_degree: int | None,
) -> Plan:
    if strategy == FCP:
        return plan_batch(lengths, cost, config, patches)
    if strategy == FCP_DDP:
        return plan_batch(lengths, cost, replace(config, step_semantics=INDEPENDENT), patches)
    baseline = get_baseline(strategy)
    if baseline.static_algo is not None:
        return baseline.planner(lengths, cost, config, patches, cp_degree=static_degree)
    return baseline.planner(lengths, cost, config, patches)


def _simulate_strategy(
    dataset: str,
    strategy: str,
    batches: Sequence[tuple[np.ndarray, np.ndarray]],
    cost: CostModel,
    config: SimulationConfig,
    progress: "tqdm | None",
) -> StrategyResult:
    solver = config.solver
    static_degree = None
    extras: dict[str, object] = {}
    plans: list[Plan] = []
    if strategy in TUNED:
        return _tuned(dataset, strategy, batches, cost, config, progress)
    if strategy in UPSTREAM:
        run, tuned = UPSTREAM[strategy]
        return _layout_run(dataset, strategy, batches, cost, config, progress,
                           lambda: upstream_run(batches, cost, config.solver, run, tuned=tuned), tuned)
    if strategy == HDP:
        return _layout_run(dataset, strategy, batches, cost, config, progress,
                           lambda: hdp_run(batches, cost, config.solver), True)
    try:
        baseline = BASELINES.get(strategy)
        if baseline is not None and baseline.static_algo is not None:
            longest = max(int(lengths.max()) for lengths, _ in batches)
            static_degree = static_cp_degree(longest, cost, solver, baseline.static_algo)
            extras["cp_degree"] = static_degree
        for lengths, patches in batches:
            plan = _plan_with(strategy, lengths, patches, cost, solver, static_degree)
            if config.validate:
                validate_plan(plan, lengths, cost, patches, priced=True)
            plans.append(plan)
            if progress is not None:
                progress.update(1)
    except BaselineInfeasibleError as err:
        logger.info("%s cannot run %s: %s", strategy, dataset, err)
        if progress is not None:
            progress.update(len(batches) - len(plans))
        return StrategyResult(dataset=dataset, strategy=strategy, error=str(err))
    semantics = INDEPENDENT if strategy == FCP_DDP else LOCKSTEP
    return StrategyResult(
        dataset=dataset,
        strategy=strategy,
        iteration_ms=tuple(step_ms(p, cost, semantics) for p in plans),
        lower_bound_ms=tuple(step_lower_bound_ms(p.lower_bound_ms, cost, semantics) for p in plans),
        solver_ms=tuple(p.solver_ms for p in plans),
        rounds=tuple(p.num_rounds for p in plans),
        extras=extras,
    )


def _tuned(dataset: str, strategy: str, batches: Sequence[tuple[np.ndarray, np.ndarray]], cost: CostModel,
           config: SimulationConfig, progress: "tqdm | None") -> StrategyResult:
    semantics = TUNED[strategy]
    return _layout_run(dataset, strategy, batches, cost, config, progress,
                       lambda: tune_static(batches, cost, config.solver, semantics), True, semantics)


def _layout_run(dataset: str, strategy: str, batches: Sequence[tuple[np.ndarray, np.ndarray]], cost: CostModel,
                config: SimulationConfig, progress: "tqdm | None", run: "Callable[[], TunedStatic]",
                tuned: bool, semantics: str = LOCKSTEP) -> StrategyResult:
    """A strategy whose layout (degree, algo) is chosen once for the run by `run` (default or tuned), its steps
    run under `semantics`."""
    try:
        chosen = run()
    except BaselineInfeasibleError as err:
        return StrategyResult(dataset=dataset, strategy=strategy, error=str(err))
    finally:
        if progress is not None:
            progress.update(len(batches))
    if config.validate:
        for plan, (lengths, patches) in zip(chosen.plans, batches):
            validate_plan(plan, lengths, cost, patches, priced=True)
    return StrategyResult(
        dataset=dataset, strategy=strategy, iteration_ms=chosen.step_ms,
        lower_bound_ms=tuple(step_lower_bound_ms(p.lower_bound_ms, cost, semantics) for p in chosen.plans),
        solver_ms=tuple(p.solver_ms for p in chosen.plans), rounds=tuple(p.num_rounds for p in chosen.plans),
        extras={"cp_degree": chosen.degree, "algo": chosen.algo, "tuned": tuned})


def draw_batches(config: SimulationConfig, dataset: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The K (lengths, vision patches) batches of `dataset`, drawn in one seeded sweep."""
    gbs = config.global_batch_size
    lengths, patches = draw_lengths(dataset, config.num_batches * gbs, config.seed)
    return [(lengths[k * gbs : (k + 1) * gbs], patches[k * gbs : (k + 1) * gbs]) for k in range(config.num_batches)]


def simulate(config: SimulationConfig, cost: CostModel, *, progress: bool = False) -> SimulationReport:
    """Plan every batch of every dataset with every strategy; see the module docstring.

    A baseline that cannot run a workload (BaselineInfeasibleError) is reported as such; a sample
    no strategy can hold (InfeasibleSampleError) is an input error and propagates.
    """
    bar = progress_bar(len(config.datasets) * len(config.strategies) * config.num_batches) if progress else None
    try:
        return simulate_with_bar(config, cost, bar)
    finally:
        if bar is not None:
            bar.close()


def progress_bar(total: int) -> "tqdm":
    """A progress bar on stderr counting `total` plans."""
    from tqdm import tqdm

    return tqdm(total=total, desc="simulate", unit="plan", file=sys.stderr)


def simulate_with_bar(config: SimulationConfig, cost: CostModel, bar: "tqdm | None") -> SimulationReport:
    """`simulate`, counting its plans on a progress bar the caller owns (None: none)."""
    results = []
    for dataset in config.datasets:
        batches = draw_batches(config, dataset)
        for strategy in config.strategies:
            if bar is not None:
                bar.set_postfix_str(f"{dataset}/{strategy} seed {config.seed}")
            results.append(_simulate_strategy(dataset, strategy, batches, cost, config, bar))
    return SimulationReport(config=config, results=tuple(results))
