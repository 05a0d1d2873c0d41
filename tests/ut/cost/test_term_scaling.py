"""`scaled_terms`: one group of a table's terms scaled, the others untouched."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.cost.presets import preset_table
from mindspeed_mm.core.fcp.cost.term_scaling import TERM_GROUPS, scaled_terms


@pytest.mark.parametrize("preset", ["a3-qwen3vl-8b", "h200-qwen3vl-8b"])
@pytest.mark.parametrize("group", sorted(TERM_GROUPS))
def test_a_group_scales_its_own_fields_only(preset: str, group: str) -> None:
    table = preset_table(preset)
    scaled = scaled_terms(table, group, 2.0)
    changed = {f.name for f in dataclasses.fields(table.time) if getattr(table.time, f.name) != getattr(scaled.time, f.name)}
    expected = {
        "attention_call_ms": {"attention_call_ms"}, "launch_ms": {"launch_ms"},
        "vision_per_call": {"vision_ms_per_call"} | ({"vision_ms"} if table.time.vision_ms is not None else set()),
        "attention": {"attention_causal_ms", "attention_full_ms"} | {
            name for name in ("attention_off_diagonal_ms", "attention_ulysses_ms") if getattr(table.time, name)},
        "linear": {"linear_ms_per_token", "output_ms_per_token"} | ({"linear_ms"} if table.time.linear_ms else set()),
        "vision_per_patch": {"vision_ms_per_patch"} | ({"vision_ms"} if table.time.vision_ms is not None else set()),
        "links": {"p2p_intra_ms", "p2p_inter_ms", "all_to_all_intra_ms", "all_to_all_inter_ms"},
        "step": set(),
    }[group]
    assert changed == expected
    assert (scaled.step != table.step) == (group == "step") and scaled.memory == table.memory
    CostModel(scaled)   # still a valid table


def test_the_vision_floor_and_slope_scale_apart_on_a_measured_curve() -> None:
    table = preset_table("h200-qwen3vl-8b")
    cost, floor2, slope2 = (CostModel(t).coefficients for t in (
        table, scaled_terms(table, "vision_per_call", 2.0), scaled_terms(table, "vision_per_patch", 2.0)))
    few, many = np.array([1.0]), np.array([1e6])
    base_floor = cost.vision_ms(few)[0]
    assert floor2.vision_ms(few)[0] == pytest.approx(2 * base_floor)
    assert floor2.vision_ms(many)[0] - cost.vision_ms(many)[0] == pytest.approx(base_floor)
    assert slope2.vision_ms(few)[0] == pytest.approx(base_floor)
    assert slope2.vision_ms(many)[0] - base_floor == pytest.approx(2 * (cost.vision_ms(many)[0] - base_floor))


def test_bad_groups_and_factors_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown term group 'memory'"):
        scaled_terms(preset_table("a3-qwen3vl-8b"), "memory", 2.0)
    with pytest.raises(ValueError, match="factor must be > 0"):
        scaled_terms(preset_table("a3-qwen3vl-8b"), "links", 0.0)
