"""A profile table with one group of its terms scaled: how far the plans move when an estimated term is off.

Each group gathers the table fields of one term of `term_provenance.TERMS` (the host floors each on their own,
as they are copied separately); `scaled_terms(table, group, factor)` multiplies every one of its fields by
`factor`. The reports vary each term that was not measured on the table's own hardware over a range (x0.5 to
x2) and show what the plans do.
"""
from __future__ import annotations

import dataclasses

from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.table import ProfileTable, TimeFigures

TERM_GROUPS = {
    "attention_call_ms": "the attention call's floor",
    "launch_ms": "the layer's host floor",
    "vision_per_call": "the vision call's floor",
    "attention": "attention work (every attention grid, Ulysses' too)",
    "linear": "linear work (and the output layer)",
    "vision_per_patch": "vision work per patch",
    "links": "every link (point-to-point and all-to-all grids)",
    "step": "the FSDP round's traffic and the optimizer step",
}
"""Groups `scaled_terms` knows, by the `provenance.terms` name they scale."""


def _times(grid: Grid | None, factor: float) -> Grid | None:
    return None if grid is None else Grid(grid.x, tuple(y * factor for y in grid.y), grid.scale)


def _curves(curves: dict[int, Grid] | None, factor: float) -> dict[int, Grid] | None:
    return None if curves is None else {k: _times(g, factor) for k, g in curves.items()}


def _scaled_time(tm: TimeFigures, group: str, f: float) -> TimeFigures:
    if group == "attention_call_ms":
        return dataclasses.replace(tm, attention_call_ms=tm.attention_call_ms * f)
    if group == "launch_ms":
        return dataclasses.replace(tm, launch_ms=tm.launch_ms * f)
    if group == "vision_per_call":
        if tm.vision_ms is not None:   # a measured curve: its value at the fewest patches is the call's floor
            floor = tm.vision_ms.y[0]
            curve = Grid(tm.vision_ms.x, tuple(y + (f - 1.0) * floor for y in tm.vision_ms.y), tm.vision_ms.scale)
            return dataclasses.replace(tm, vision_ms=curve, vision_ms_per_call=tm.vision_ms_per_call * f)
        return dataclasses.replace(tm, vision_ms_per_call=tm.vision_ms_per_call * f)
    if group == "attention":
        return dataclasses.replace(
            tm, attention_causal_ms=_times(tm.attention_causal_ms, f), attention_full_ms=_times(tm.attention_full_ms, f),
            attention_off_diagonal_ms=_times(tm.attention_off_diagonal_ms, f),
            attention_ulysses_ms=_curves(tm.attention_ulysses_ms, f))
    if group == "linear":
        return dataclasses.replace(tm, linear_ms_per_token=tm.linear_ms_per_token * f, linear_ms=_times(tm.linear_ms, f),
                                   output_ms_per_token=tm.output_ms_per_token * f)
    if group == "vision_per_patch":
        if tm.vision_ms is not None:   # a measured curve: what it adds above its floor
            floor = tm.vision_ms.y[0]
            curve = Grid(tm.vision_ms.x, tuple(floor + (y - floor) * f for y in tm.vision_ms.y), tm.vision_ms.scale)
            return dataclasses.replace(tm, vision_ms=curve, vision_ms_per_patch=tm.vision_ms_per_patch * f)
        return dataclasses.replace(tm, vision_ms_per_patch=tm.vision_ms_per_patch * f)
    if group == "links":
        return dataclasses.replace(
            tm, p2p_intra_ms=_times(tm.p2p_intra_ms, f), p2p_inter_ms=_times(tm.p2p_inter_ms, f),
            all_to_all_intra_ms=_times(tm.all_to_all_intra_ms, f), all_to_all_inter_ms=_times(tm.all_to_all_inter_ms, f),
            p2p_by_group_size_ms=_curves(tm.p2p_by_group_size_ms, f),
            all_to_all_by_group_size_ms=_curves(tm.all_to_all_by_group_size_ms, f))
    raise ValueError(f"unknown term group {group!r}; valid: {sorted(TERM_GROUPS)}")


def scaled_terms(table: ProfileTable, group: str, factor: float) -> ProfileTable:
    """`table` with the fields of `group` (`TERM_GROUPS`) multiplied by `factor` (> 0)."""
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor!r}")
    if group == "step":
        if table.step is None:
            return table
        step = dataclasses.replace(table.step, fsdp_round_ms=table.step.fsdp_round_ms * factor,
                                   optimizer_ms=table.step.optimizer_ms * factor,
                                   replica_reduction_ms=table.step.replica_reduction_ms * factor)
        return dataclasses.replace(table, step=step)
    return dataclasses.replace(table, time=_scaled_time(table.time, group, factor))
