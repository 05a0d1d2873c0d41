"""Gantt chart of a plan: which ranks run which group, round after round, on a time axis."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mindspeed_mm.core.fcp.solver import Plan

_ALGO_COLOURS = {"ring": "#4C72B0", "ulysses": "#DD8452", "hybrid": "#55A868"}
_OTHER_COLOUR = "#8172B3"
_IDLE_COLOUR = "#E5E5E5"


def draw_plan(
    plan: Plan,
    path: str | Path,
    *,
    lengths: Sequence[int] | None = None,
    title: str | None = None,
) -> Path:
    """Draw `plan` to a PNG: ranks on the y axis, predicted time on the x axis.

    Each group is a box spanning its ranks for its predicted time, coloured by algo and labelled
    with its degree and sample count (and tokens, when `lengths` is given); the grey remainder of a
    round is the time its ranks wait for the round's slowest group.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    n = plan.num_ranks
    figure = Figure(figsize=(11.0, max(3.0, min(14.0, 1.2 + 0.18 * n))))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    total = max(plan.predicted_ms, 1e-9)
    start = 0.0
    for index, round_plan in enumerate(plan.rounds):
        for group in round_plan.groups:
            low = group.ranks[0] - 0.45
            height = group.degree - 0.1
            colour = _ALGO_COLOURS.get(group.algo, _OTHER_COLOUR)
            axes.add_patch(Rectangle((start, low), group.predicted_ms, height, facecolor=colour, edgecolor="black",
                                     linewidth=0.4))
            idle = round_plan.predicted_ms - group.predicted_ms
            if idle > 0:
                axes.add_patch(Rectangle((start + group.predicted_ms, low), idle, height, facecolor=_IDLE_COLOUR,
                                         edgecolor="none"))
            if group.predicted_ms > 0.04 * total and height >= 0.8:
                label = f"d{group.degree} x{len(group.samples)}"
                if lengths is not None:
                    tokens = sum(int(lengths[s]) for s in group.samples)
                    label += f"\n{tokens / 1000:.1f}K tok"
                axes.text(start + group.predicted_ms / 2, low + height / 2, label, ha="center", va="center",
                          fontsize=6, color="white")
        start += round_plan.predicted_ms
        axes.axvline(start, color="black", linewidth=0.8, linestyle="--")
        axes.text(start - round_plan.predicted_ms / 2, -0.9, f"round {index}", ha="center", va="bottom", fontsize=7)
    axes.set_xlim(0.0, total)
    axes.set_ylim(n - 0.5, -1.0)
    axes.set_xlabel("predicted time (ms)")
    axes.set_ylabel("FCP rank")
    axes.set_title(
        title
        or f"{plan.num_rounds} rounds on {n} ranks: {plan.predicted_ms:,.1f} ms predicted, "
        f"lower bound {plan.lower_bound_ms:,.1f} ms"
    )
    used = sorted({g.algo for r in plan.rounds for g in r.groups})
    handles = [Patch(facecolor=_ALGO_COLOURS.get(a, _OTHER_COLOUR), label=a) for a in used]
    handles.append(Patch(facecolor=_IDLE_COLOUR, label="waiting for the round"))
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    figure.tight_layout()
    out = Path(path)
    figure.savefig(out, dpi=120)
    return out
