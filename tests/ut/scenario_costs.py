"""The cost models the planner's scenario tests were built on: the A3 and H100 + Qwen3-VL-8B presets as they were
before the presets took the H200's measured host floors: a small attention call cost paid by every document (A3
0.03 ms, H100 0.01 ms, in the attention grids, no call floor) and a small per-layer launch cost (0.1 / 0.05 ms).

Those tests pin planner behaviours (a start that loses its lead when placed, a closed own-group start, a
round count decided by FSDP traffic, ...) on concrete batches whose numbers they quote; they need a cost
model that does not move when a preset's calibration does. What the presets themselves predict is reported by
`fcp simulate` and the benchmarks, not asserted here.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.presets import MODELS, build_preset_table

SCENARIO_HOST_COSTS = {"a3": (0.03, 0.1), "h100": (0.01, 0.05)}
"""(attention call ms paid per document, launch ms per layer) of the scenarios, per hardware."""


def a3_scenario(*, max_tokens_per_rank: int | None = None, algos: Any = None, hardware: str = "a3",
                **options: Any) -> CostModel:
    """`CostModel.from_preset("<hardware>-qwen3vl-8b", ...)` with the scenarios' host costs."""
    call, layer = SCENARIO_HOST_COSTS[hardware]
    # A vision block charged the layer's launch cost, as the scenarios were written.
    table = build_preset_table(hardware, "qwen3vl-8b", host_floors=(0.0, layer, layer), **options)
    tm = table.time

    def per_document(grid: Grid) -> Grid:
        return Grid(grid.x, tuple(y + call for y in grid.y), grid.scale)

    time = dataclasses.replace(tm, attention_causal_ms=per_document(tm.attention_causal_ms),
                               attention_full_ms=per_document(tm.attention_full_ms),
                               vision_ms_per_call=tm.vision_ms_per_call + MODELS["qwen3vl-8b"].encoder.depth * call)
    table = dataclasses.replace(table, time=time)
    if algos is None:
        return CostModel(table, max_tokens_per_rank=max_tokens_per_rank)
    return CostModel(table, max_tokens_per_rank=max_tokens_per_rank, algos=algos)
