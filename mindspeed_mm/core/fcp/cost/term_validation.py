"""Every fitted compute term scored on rows its fit did not see, beside its error on the rows it saw.

A fit scored on the rows it was fitted to says little: a curve through its points is exact there. Two
held-out scores answer for it instead:

- leave one out: each row predicted by the fit of all the other rows;
- small to large: each part's largest size predicted by the fit of the smaller sizes, every part that
  shares the fit cut at that size too (the attention parts C, K, B and U share one fit; the real model's
  layer H also reads L and that fit), which is how a fit is used beyond what was measured.

`device_held_out` scores the fits of a device measurement file (`measured_compute`); `table_held_out`
scores a profile table's measured grids (`fcp profile`) the same way, point by point. The goal of every
term is a held-out error of at most `GOAL_MEAN` on average and `GOAL_WORST` at the worst row; a term that
misses it is a gap to name, with its reason.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mindspeed_mm.core.fcp.cost.analytic import ATTENTION_BACKWARD_RATIO, LINEAR_BACKWARD_RATIO
from mindspeed_mm.core.fcp.cost.grid import Grid, fit_quadratic
from mindspeed_mm.core.fcp.cost.measured_compute import (
    TERM_NAMES, MeasuredCompute, MeasuredRow, TermError, fit_errors, fit_measured_compute, load_rows,
    row_size,
)
from mindspeed_mm.core.fcp.cost.shapes import EncoderShape
from mindspeed_mm.core.fcp.cost.table import ProfileTable

GOAL_MEAN = 0.10
"""Held-out mean |predicted / measured - 1| every term should reach."""
GOAL_WORST = 0.25
"""Held-out |predicted / measured - 1| no row of a term should exceed."""
_ATTENTION = frozenset("CKBU")
SHARES_FIT = {"L": frozenset("L"), "C": _ATTENTION, "K": _ATTENTION, "B": _ATTENTION, "U": _ATTENTION,
              "HV": frozenset({"HV"}), "H": _ATTENTION | {"L", "H"}}
"""The parts whose rows a part's fit reads (cut together in the small-to-large score)."""


@dataclass(frozen=True)
class HeldOutTerm:
    """One term's errors: in sample, left out one row at a time, and its largest size from the smaller."""

    term: str
    """What is compared."""
    in_sample: TermError
    """The fit of every row at every row."""
    leave_one_out: TermError
    """Each row predicted by the fit of the others."""
    small_to_large: TermError | None
    """The rows of the largest size predicted by the fit of the smaller sizes (None: one size only)."""

    @property
    def held_out_mean(self) -> float:
        """Mean |error| left out one at a time (nan when no row could be left out)."""
        return self.leave_one_out.mean_abs_error if self.leave_one_out.points else float("nan")

    @property
    def held_out_worst(self) -> float:
        """The largest |error| of any held-out prediction (left out or beyond the sizes fitted; nan: none)."""
        errors = [abs(e.worst[2]) for e in (self.leave_one_out, self.small_to_large) if e is not None and e.points]
        return max(errors) if errors else float("nan")

    @property
    def meets_goal(self) -> bool:
        """Whether the held-out errors are within the goal: `GOAL_MEAN` over the rows left out one at a time,
        `GOAL_WORST` at any held-out prediction."""
        return self.held_out_mean <= GOAL_MEAN and self.held_out_worst <= GOAL_WORST


def held_out(rows: Sequence[MeasuredRow], errors: Callable[[list[MeasuredRow], list[MeasuredRow]], list[TermError]],
             shares_fit: dict[str, frozenset[str]], size: Callable[[MeasuredRow], float]) -> list[HeldOutTerm]:
    """The three scores of every term `errors(fit_rows, scored_rows)` reports (see the module docstring).

    `shares_fit[part]`: the parts whose rows the fit of `part` reads; `size`: a row's size along its part. A row
    without which nothing can be fitted (`errors` raises ValueError: its part's last row, say) is not scored left
    out, nor is a largest size the smaller ones cannot fit.
    """
    rows = list(rows)
    scored = [r for r in rows if r.part in shares_fit]
    in_sample = {e.term: e for e in errors(rows, scored)}
    left_out = {term: TermError(term, []) for term in in_sample}
    for row in scored:
        try:
            for error in errors([r for r in rows if r is not row], [row]):
                left_out[error.term].points.extend(error.points)
        except ValueError:
            continue
    beyond: dict[str, TermError] = {}
    for part in sorted({r.part for r in scored}):
        largest = max(size(r) for r in scored if r.part == part)
        if all(size(r) == largest for r in scored if r.part == part):
            continue
        cut = [r for r in rows if not (r.part in shares_fit[part] and size(r) >= largest)]
        targets = [r for r in scored if r.part == part and size(r) >= largest]
        try:
            for error in errors(cut, targets):
                beyond[error.term] = error
        except ValueError:
            continue
    return [HeldOutTerm(term, in_sample[term], left_out[term], beyond.get(term)) for term in in_sample]


def device_held_out(name: str, rows: Sequence[MeasuredRow],
                    fit: Callable[[str, list[MeasuredRow]], MeasuredCompute] = fit_measured_compute,
                    ) -> list[HeldOutTerm]:
    """The scores of the compute terms fitted to a device measurement file (`fit_measured_compute`)."""
    def errors(fit_rows: list[MeasuredRow], scored: list[MeasuredRow]) -> list[TermError]:
        return fit_errors(fit(name, fit_rows), scored)

    return held_out(rows, errors, SHARES_FIT, row_size)


@functools.lru_cache(maxsize=1)
def packaged_held_out() -> tuple[HeldOutTerm, ...]:
    """`device_held_out` of the packaged device measurements (`measured_compute.load_rows()`), computed once."""
    return tuple(device_held_out(*load_rows()))


def matmul_rate_tflops(rows: Sequence[MeasuredRow]) -> float | None:
    """The GEMM rate the device reached (part A, TFLOP/s), None when not measured."""
    rates = [float(r.fields["tflops"]) for r in rows if r.part == "A"]
    return max(rates) if rates else None


def vision_block_flops_per_patch(encoder: EncoderShape) -> float:
    """Forward + backward FLOPs of one vision block per patch, from the encoder's counts (`cost.shapes`): its
    matmuls (backward 2 GEMMs each) and its attention over the encoder's window, full mask (backward 2.5 times
    the forward, `cost.analytic`)."""
    matmuls = 2.0 * encoder.block_matmul_params()
    attention = encoder.attention_forward_flops_per_patch() / encoder.depth
    return (1 + LINEAR_BACKWARD_RATIO) * matmuls + (1 + ATTENTION_BACKWARD_RATIO) * attention


def vision_flop_rate_tflops(measured: MeasuredCompute, encoder: EncoderShape) -> float:
    """The FLOP rate the vision block's large-size slope implies (TFLOP/s): what the tail of the fitted curve
    claims the device does per patch, to be checked against the GEMM rate the device reached."""
    if measured.vision_line is None or measured.vision_line[1] <= 0:
        raise ValueError("the vision block's slope was not measured (part HV)")
    return vision_block_flops_per_patch(encoder) / (measured.vision_line[1] * 1e-3) / 1e12


# ---------------------------------------------------------------------------- profile tables

@dataclass(frozen=True)
class GridPoint:
    """A measured point of a profile table's grid, as a row for `held_out` (`part` names the grid)."""

    part: str
    """The grid's name."""
    line: int
    """Its index in the grid."""
    x: float
    """Tokens, document length or patches."""
    y: float
    """The grid's time there (ms)."""


def table_grids(table: ProfileTable) -> dict[str, tuple[Grid, str, float]]:
    """The measured grids of a profile table, how the cost model reads each (`quadratic`: the fit of a
    document's time; `curve`: interpolated) and the fixed time it adds to each point (a layer's share of
    `launch_ms` for the linear curve, which holds the work above it), under the names `table_held_out` reports."""
    tm = table.time
    grids = {"attention, causal document": (tm.attention_causal_ms, "quadratic", 0.0)}
    if tm.attention_off_diagonal_ms is not None:
        grids["ring off-diagonal block"] = (tm.attention_off_diagonal_ms, "quadratic", 0.0)
    for degree, grid in sorted((tm.attention_ulysses_ms or {}).items()):
        grids[f"Ulysses attention, degree {degree}"] = (grid, "quadratic", 0.0)
    if tm.linear_ms is not None:
        grids["linear work (layer)"] = (tm.linear_ms, "curve", tm.launch_ms / table.layers_per_stage)
    if tm.vision_ms is not None:
        grids["vision encoder call"] = (tm.vision_ms, "curve", 0.0)
    return grids


def table_held_out(table: ProfileTable) -> list[HeldOutTerm]:
    """The scores of a profile table's measured grids, each point predicted by the grid without it (and the
    largest by the grid without it): what the cost model reads there (the quadratic fit of an attention grid,
    the interpolated curve of the others). Grids of fewer than 3 points are left out: one point left predicts
    nothing."""
    grids = {name: entry for name, entry in table_grids(table).items() if len(entry[0].x) >= 3}
    points = [GridPoint(name, k, float(x), float(y)) for name, (grid, _, _) in grids.items()
              for k, (x, y) in enumerate(zip(grid.x, grid.y))]

    def errors(fit_points: list[GridPoint], scored: list[GridPoint]) -> list[TermError]:
        out = []
        for name, (grid, reading, fixed) in grids.items():
            mine = [p for p in scored if p.part == name]
            if not mine:
                continue
            kept = [p for p in fit_points if p.part == name]
            predict = _reader(Grid(tuple(p.x for p in kept), tuple(p.y for p in kept), grid.scale), reading)
            out.append(TermError(name, [(p.line, f"{p.x:g}", fixed + p.y, fixed + predict(p.x)) for p in mine]))
        return out

    return held_out(points, errors, {name: frozenset({name}) for name in grids}, lambda p: p.x)  # type: ignore[arg-type]


def ulysses_rule_errors(table: ProfileTable) -> TermError | None:
    """The rule a fit of device rows uses for a Ulysses rank (the full heads' work / d: (alpha s^2 + beta s) / d
    + gamma of the causal grid's fit) against a table's measured Ulysses grids, every degree and length; None
    when the table measured none."""
    grids = table.time.attention_ulysses_ms
    if not grids:
        return None
    alpha, beta, gamma = fit_quadratic(table.time.attention_causal_ms)
    return TermError("Ulysses rank = full heads / d", [
        (k, f"{x:g} tokens, degree {d}", y, (alpha * x * x + beta * x) / d + gamma)
        for d, grid in sorted(grids.items()) for k, (x, y) in enumerate(zip(grid.x, grid.y))])


def _reader(grid: Grid, reading: str) -> Callable[[float], float]:
    if reading == "quadratic":
        alpha, beta, gamma = fit_quadratic(grid)
        return lambda x: alpha * x * x + beta * x + gamma
    return lambda x: float(grid(x))


def without_largest_sizes(table: ProfileTable) -> ProfileTable:
    """`table` with every measured grid cut before its largest size (the Ulysses grids too): the table a
    profile of the smaller sizes alone would have given, to price what the full one was validated on."""
    tm = table.time

    def cut(grid: Grid | None) -> Grid | None:
        if grid is None or len(grid.x) < 3:
            return grid
        return Grid(grid.x[:-1], grid.y[:-1], grid.scale)

    time = dataclasses.replace(
        tm, attention_causal_ms=cut(tm.attention_causal_ms), attention_full_ms=cut(tm.attention_full_ms),
        attention_off_diagonal_ms=cut(tm.attention_off_diagonal_ms), linear_ms=cut(tm.linear_ms),
        vision_ms=cut(tm.vision_ms),
        attention_ulysses_ms=None if tm.attention_ulysses_ms is None
        else {d: cut(g) for d, g in tm.attention_ulysses_ms.items()})
    return dataclasses.replace(table, time=time)


def lines(terms: Sequence[HeldOutTerm], what: str = "rows") -> list[str]:
    """A Markdown table of the scores, one term a line."""
    out = [f"| term | {what} | in sample: mean / worst | leave one out: mean / worst (row) | "
           f"largest size from the smaller: error (row) | goal |", "|---|---|---|---|---|---|"]
    for t in terms:
        _, _, in_worst = t.in_sample.worst
        _, row, loo_worst = t.leave_one_out.worst if t.leave_one_out.points else (0, "none left out", float("nan"))
        if t.small_to_large is None:
            beyond = "one size only"
        else:
            _, big_row, big = t.small_to_large.worst
            beyond = f"{100 * t.small_to_large.mean_abs_error:.1f}% mean, {100 * big:+.1f}% ({big_row})"
        out.append(f"| {t.term} | {len(t.in_sample.points)} | {100 * t.in_sample.mean_abs_error:.1f}% / "
                   f"{100 * in_worst:+.1f}% | {100 * t.held_out_mean:.1f}% / {100 * loo_worst:+.1f}% ({row}) | "
                   f"{beyond} | {'met' if t.meets_goal else 'missed'} |")
    return out


__all__ = ["GOAL_MEAN", "GOAL_WORST", "SHARES_FIT", "TERM_NAMES", "HeldOutTerm", "device_held_out", "held_out",
           "lines", "matmul_rate_tflops", "packaged_held_out", "table_held_out", "ulysses_rule_errors", "vision_block_flops_per_patch", "vision_flop_rate_tflops",
           "without_largest_sizes"]
