"""Bar charts of strategy speedups per dataset (matplotlib, imported only when a chart is drawn)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from mindspeed_mm.core.fcp.simulate.simulator import REFERENCE, SimulationReport


def plot_speedups(datasets: Sequence[str], strategies: Sequence[str],
                  value: Callable[[str, str], tuple[float, tuple[float, float] | None]], title: str,
                  path: str | Path) -> Path:
    """Bar chart of value(dataset, strategy) = (speedup over the reference, optional (min, max) drawn
    as an error bar), per dataset, written to `path` (PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2.2 + 1.6 * len(datasets), 4.0))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    width = 0.8 / len(strategies)
    for i, strategy in enumerate(strategies):
        found = [value(d, strategy) for d in datasets]
        values = [v for v, _ in found]
        xs = [j + (i - (len(strategies) - 1) / 2) * width for j in range(len(datasets))]
        bars = axes.bar(xs, [0.0 if math.isnan(v) else v for v in values], width, label=strategy)
        spans = [(x, v, span) for x, (v, span) in zip(xs, found) if span is not None and not math.isnan(v)]
        if spans:
            axes.errorbar([x for x, _, _ in spans], [v for _, v, _ in spans],
                          yerr=[[v - lo for _, v, (lo, _) in spans], [hi - v for _, v, (_, hi) in spans]],
                          fmt="none", ecolor="black", elinewidth=0.7, capsize=2)
        for bar, v in zip(bars, values):
            label = "n/a" if math.isnan(v) else f"{v:.2f}"
            axes.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                          va="bottom", fontsize=7)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(range(len(datasets)), list(datasets))
    axes.set_ylabel(f"speedup over {REFERENCE}")
    axes.set_title(title)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    figure.tight_layout()
    out = Path(path)
    figure.savefig(out, dpi=120)
    return out


def plot_report(report: SimulationReport, path: str | Path) -> Path:
    """Bar chart of each strategy's speedup over the reference, per dataset, written to `path` (PNG)."""
    config = report.config
    return plot_speedups(config.datasets, config.strategies, lambda d, s: (report.speedup(d, s), None),
                         f"{config.solver.num_ranks} ranks, global batch {config.global_batch_size}", path)
