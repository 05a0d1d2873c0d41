"""How far a table's predictions can be trusted, for the reports that compare strategies on it.

A report's margin (another strategy's predicted step over FCP's) is a difference of two predictions of the same
model; where it is smaller than what the model's terms miss on rows they were not fitted to, the model cannot
tell the two apart. `model_error(table)` gives that figure: the largest held-out mean error of the table's
measured compute terms (`term_validation`: each row predicted by the fit of the others), or None where the
table's compute terms were not measured on its hardware (the analytic presets: their error is unknown).
`margin_verdict` says on which side of it a margin falls.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.core.fcp.cost.term_validation import HeldOutTerm, packaged_held_out, table_held_out


@dataclass(frozen=True)
class ModelError:
    """The held-out error a table's comparisons should be read against."""

    held_out_mean: float | None
    """The largest mean |error| of a compute term held out; None: the terms were not measured."""
    term: str
    """The term of that error (or why there is none)."""
    range_text: str
    """The terms' held-out means, smallest to largest, as text."""

    def describe(self) -> str:
        """One sentence for a report."""
        if self.held_out_mean is None:
            return f"model error held out: unknown ({self.term})"
        return (f"model error held out: the compute terms miss rows they did not see by {self.range_text} on "
                f"average, {100 * self.held_out_mean:.1f}% at most ({self.term})")


def _from_terms(terms: Sequence[HeldOutTerm]) -> ModelError:
    means = sorted((t.held_out_mean, t.term) for t in terms if t.leave_one_out.points)
    if not means:
        return ModelError(None, "no term could be held out", "")
    return ModelError(means[-1][0], means[-1][1], f"{100 * means[0][0]:.1f}-{100 * means[-1][0]:.1f}%")


def model_error(table: ProfileTable) -> ModelError:
    """The held-out error of `table`'s compute terms (see the module docstring)."""
    provenance = table.provenance
    if "measured_compute" in provenance:
        return _from_terms(packaged_held_out())
    if provenance.get("source") == "measured by fcp profile":
        return _from_terms(table_held_out(table))
    return ModelError(None, "analytic compute terms, not measured on this hardware; the H200's analytic terms missed "
                            "its measurements by 35-87% (benchmarks/results/device_cost_terms.md)", "")


def margin_verdict(margin: float, error: ModelError) -> str:
    """Whether a predicted margin (strategy / FCP - 1) is beyond the model's held-out error."""
    if error.held_out_mean is None:
        return "model error unknown"
    return "beyond the model's error" if abs(margin) > error.held_out_mean else "inside the model's error"
