"""Every preset term says where it comes from (`provenance.terms`)."""
from __future__ import annotations

import pytest

from mindspeed_mm.core.fcp.cost.presets import list_presets, preset_table
from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.core.fcp.cost.term_provenance import TERM_KINDS, TERMS, not_measured


@pytest.mark.parametrize("name", list_presets())
def test_every_term_of_every_preset_has_a_kind_and_a_source(name: str) -> None:
    terms = preset_table(name).provenance["terms"]
    assert tuple(terms) == TERMS
    assert all(entry["kind"] in TERM_KINDS and entry["source"] for entry in terms.values())
    # The table's JSON form keeps them.
    assert ProfileTable.from_dict(preset_table(name).to_dict()).provenance["terms"] == terms


def test_measured_copied_and_given_terms_are_told_apart() -> None:
    h200 = preset_table("h200-qwen3vl-8b").provenance["terms"]
    assert not_measured({"terms": h200}) == ["output", "links", "memory", "step"]
    assert "h200_qwen3vl8b_compute.jsonl" in h200["attention"]["source"]
    a3 = preset_table("a3-qwen3vl-8b").provenance["terms"]
    assert {t for t, e in a3.items() if e["kind"] == "copied"} == {"attention_call_ms", "launch_ms", "vision_per_call"}
    assert a3["attention"]["kind"] == "analytic" and "hia3" in a3["attention"]["source"]
    # Another TP size keeps the analytic compute terms; floors given by the caller say so.
    assert preset_table("h200-qwen3vl-8b", tp=2).provenance["terms"]["attention"]["kind"] == "analytic"
    given = preset_table("a3-qwen3vl-8b", host_floors=(0.5, 2.0)).provenance["terms"]
    assert (given["attention_call_ms"]["kind"], given["launch_ms"]["kind"], given["vision_per_call"]["kind"]) == \
        ("given", "given", "copied")
