"""The cost models the planner's scenario tests were built on: the A3 and H100 + Qwen3-VL-8B presets with small
host-side floors (A3: 0.03 ms per attention call, 0.1 ms per layer; H100: 0.01 and 0.05 ms) instead of the H200's
measured ones the presets carry.

Those tests pin planner behaviours (a start that loses its lead when placed, a closed own-group start, a
round count decided by FSDP traffic, ...) on concrete batches whose numbers they quote; they need a cost
model that does not move when a preset's calibration does. What the preset itself predicts is reported by
`fcp simulate` and the benchmarks, not asserted here.
"""
from __future__ import annotations

from typing import Any

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.presets import build_preset_table

SCENARIO_HOST_FLOORS = {"a3": (0.03, 0.1), "h100": (0.01, 0.05)}
"""(attention call ms, layer ms) of the scenarios, per hardware."""


def a3_scenario(*, max_tokens_per_rank: int | None = None, algos: Any = None, hardware: str = "a3",
                **options: Any) -> CostModel:
    """`CostModel.from_preset("<hardware>-qwen3vl-8b", ...)` with the scenarios' host floors."""
    table = build_preset_table(hardware, "qwen3vl-8b", host_floors=SCENARIO_HOST_FLOORS[hardware], **options)
    if algos is None:
        return CostModel(table, max_tokens_per_rank=max_tokens_per_rank)
    return CostModel(table, max_tokens_per_rank=max_tokens_per_rank, algos=algos)
