"""The strategy simulation over several seeds: every figure as a mean with its min-max spread.

Each seed is one run of K global batches (`simulate`): static strategies take their default degree,
and the tuned static ones their best (degree, algo), for that run's batches, as a launch would. Per
strategy and dataset the table reports, over all seeds x batches, the per-batch speedup
(strategy time / FCP time on the same batch) as mean [min-max], and the spread of the per-seed
speedups (total over the seed's K batches), the same ratio `benchmarks/flexibility_report.py` uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.speedup_plot import plot_speedups
from mindspeed_mm.core.fcp.simulate.simulator import (
    FCP,
    REFERENCE,
    fcp_counterpart,
    SimulationConfig,
    SimulationReport,
    StrategyResult,
    progress_bar,
    simulate_with_bar,
)


@dataclass(frozen=True)
class Spread:
    """Mean and extremes of a set of ratios (nan when a strategy did not run every seed)."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float] | None) -> "Spread":
        if not values:
            return cls(math.nan, math.nan, math.nan)
        return cls(float(np.mean(values)), float(min(values)), float(max(values)))

    def text(self, digits: int = 3) -> str:
        """'mean [min-max]', or 'n/a'."""
        if math.isnan(self.mean):
            return "n/a"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}-{self.high:.{digits}f}]"


@dataclass(frozen=True)
class SeedSweep:
    """One `SimulationReport` per seed, same datasets, strategies, batches and cluster."""

    reports: tuple[SimulationReport, ...]
    """In seed order."""

    @property
    def seeds(self) -> tuple[int, ...]:
        """The seeds, in order."""
        return tuple(r.config.seed for r in self.reports)

    @property
    def config(self) -> SimulationConfig:
        """The first seed's configuration (the others differ only in the seed)."""
        return self.reports[0].config

    def runs(self, dataset: str, strategy: str) -> list[StrategyResult]:
        """The strategy's result on the dataset for every seed (KeyError: not simulated)."""
        return [r.result(dataset, strategy) for r in self.reports]

    def batch_ratios(self, dataset: str, strategy: str, over: str) -> list[float] | None:
        """time(over) / time(strategy) of every batch of every seed; None when either failed a seed
        or was not simulated."""
        if not {strategy, over} <= set(self.config.strategies):
            return None
        ratios: list[float] = []
        for this, base in zip(self.runs(dataset, strategy), self.runs(dataset, over)):
            if not (this.ok and base.ok):
                return None
            ratios.extend(b / t for b, t in zip(base.iteration_ms, this.iteration_ms))
        return ratios

    def seed_ratios(self, dataset: str, strategy: str, over: str) -> list[float] | None:
        """Per seed, total time(over) / total time(strategy) over its K batches; None as above."""
        ratios = [r.speedup(dataset, strategy, over=over) for r in self.reports]
        return None if any(math.isnan(x) for x in ratios) else ratios

    def fcp_speedup(self, dataset: str, strategy: str) -> Spread:
        """The strategy's time / FCP's time per batch, over seeds x batches (> 1: FCP faster)."""
        return Spread.of(self.batch_ratios(dataset, self._fcp_of(strategy), over=strategy))

    def _fcp_of(self, strategy: str) -> str:
        return fcp_counterpart(strategy, self.reports[0].config.strategies) if self.reports else FCP

    def fcp_speedup_per_seed(self, dataset: str, strategy: str) -> Spread:
        """The strategy's total time / FCP's total time per seed, over the seeds."""
        return Spread.of(self.seed_ratios(dataset, self._fcp_of(strategy), over=strategy))

    def speedup(self, dataset: str, strategy: str) -> Spread:
        """The reference's time / the strategy's time per batch, over seeds x batches."""
        return Spread.of(self.batch_ratios(dataset, strategy, over=REFERENCE))

    def table(self) -> str:
        """Text table: per dataset and strategy, the spreads above, the bound ratio and plan time."""
        headers = ("dataset", "strategy", "iter ms", "rounds", f"vs {REFERENCE}", "FCP speedup [min-max]",
                   "per seed [min-max]", "/ bound", "plan ms")
        rows: list[tuple[str, ...]] = []
        notes: list[str] = []
        for dataset in self.config.datasets:
            for strategy in self.config.strategies:
                runs = self.runs(dataset, strategy)
                failed = [(seed, r.error) for seed, r in zip(self.seeds, runs) if not r.ok]
                if failed:
                    rows.append((dataset, strategy, "n/a", "", "", "", "", "", ""))
                    notes.extend(f"{dataset} / {strategy}, seed {seed}: {error}" for seed, error in failed)
                    continue
                steps = [t for r in runs for t in r.iteration_ms]
                bounds = [b for r in runs for b in r.lower_bound_ms]
                rows.append((
                    dataset,
                    strategy + _labels(runs),
                    f"{np.mean(steps):,.1f}",
                    f"{np.mean([n for r in runs for n in r.rounds]):.1f}",
                    _times(self.speedup(dataset, strategy).mean),
                    self.fcp_speedup(dataset, strategy).text(),
                    self.fcp_speedup_per_seed(dataset, strategy).text(),
                    f"{sum(steps) / sum(bounds):.3f}",
                    f"{np.median([m for r in runs for m in r.solver_ms]):.1f}",
                ))
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        lines = [line(headers), "  ".join("-" * w for w in widths)]
        previous = None
        for row in rows:
            lines.append(line(("" if row[0] == previous else row[0], *row[1:])))
            previous = row[0]
        cfg = self.config
        lines += [
            "",
            f"seeds {','.join(map(str, self.seeds))} x {cfg.num_batches} batches x {cfg.global_batch_size} samples "
            f"per dataset on {cfg.solver.num_ranks} ranks ({cfg.solver.ranks_per_node} per node). "
            f"iter ms = mean predicted step time; vs {REFERENCE} = its time / this strategy's, mean per batch; "
            "FCP speedup = this strategy's time / FCP's on the same batch (fcp_ddp's for tuned_static_ddp), mean "
            "[min-max] over seeds x batches; step times include the preset's optimizer step and parameter / "
            "gradient traffic (FSDP rounds; fcp_ddp and tuned_static_ddp reduce once per step); "
            "per seed = the same ratio of totals over each seed's batches, mean [min-max] over seeds; "
            "/ bound = total time / total lower bound; plan ms = median.",
        ]
        lines.extend(notes)
        return "\n".join(lines)


def _times(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}x"


def _labels(runs: Sequence[StrategyResult]) -> str:
    """' (CP 4, default)' / ' (ring 2/4, tuned)': the static degrees the seeds' runs took."""
    extras = [r.extras for r in runs if "cp_degree" in r.extras]
    if not extras:
        return ""
    if "algo" in extras[0]:
        shown = sorted({f"{e['algo']} {e['cp_degree']}" for e in extras})
        return f" ({'/'.join(shown)}, {'tuned' if extras[0].get('tuned', True) else 'default'})"
    degrees = sorted({int(e["cp_degree"]) for e in extras})  # type: ignore[call-overload]
    return f" (CP {'/'.join(map(str, degrees))}, default)"


def simulate_seeds(config: SimulationConfig, cost: CostModel, seeds: Sequence[int], *,
                   progress: bool = False) -> SeedSweep:
    """`simulate` once per seed (config's seed replaced), every seed on the same cost model."""
    if not seeds:
        raise ValueError("seeds: give at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: a seed is repeated in {','.join(map(str, seeds))}")
    total = len(seeds) * len(config.datasets) * len(config.strategies) * config.num_batches
    bar = progress_bar(total) if progress else None
    try:
        return SeedSweep(tuple(simulate_with_bar(replace(config, seed=int(seed)), cost, bar) for seed in seeds))
    finally:
        if bar is not None:
            bar.close()


def plot_sweep(sweep: SeedSweep, path: str | Path) -> Path:
    """Bar chart of each strategy's speedup over the reference (mean, min-max bars), per dataset."""
    cfg = sweep.config

    def value(dataset: str, strategy: str) -> tuple[float, tuple[float, float] | None]:
        spread = sweep.speedup(dataset, strategy)
        return spread.mean, (None if math.isnan(spread.mean) else (spread.low, spread.high))

    title = (f"{cfg.solver.num_ranks} ranks, global batch {cfg.global_batch_size}, "
             f"{len(sweep.seeds)} seeds x {cfg.num_batches} batches")
    return plot_speedups(cfg.datasets, cfg.strategies, value, title, path)
