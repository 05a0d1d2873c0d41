"""Where every term of a preset table comes from: measured, analytic, copied, given or estimated, and from what.

A preset's `provenance.terms` maps each term of the table to {"kind", "source"}:
- `measured`: fitted to measurements of this hardware and model (the lines are in `provenance.measured_compute`);
- `analytic`: computed from public figures (peak FLOP/s, bandwidths, shapes) with efficiency factors (the
  source keys of `presets.SOURCES`; the factors themselves are estimates where the preset notes say so);
- `copied`: measured on another device and assumed here (the H200's host floors on the other accelerators);
- `given`: passed by the caller (`host_floors`);
- `estimate`: an engineering guess (the CPU preset's rough figures).
The terms the reports vary (`term_scaling`) are those not `measured`.
"""
from __future__ import annotations

from typing import Any

TERM_KINDS = ("measured", "analytic", "copied", "given", "estimate")
TERMS = ("attention", "attention_call_ms", "ulysses_attention", "linear", "launch_ms", "output", "vision_per_patch",
         "vision_per_call", "links", "memory", "step")
"""The terms of a table, as `provenance.terms` names them."""


def _entry(kind: str, source: str) -> dict[str, str]:
    assert kind in TERM_KINDS, kind
    return {"kind": kind, "source": source}


def preset_term_provenance(hardware: str, hardware_sources: str, *, measured_file: str | None,
                           host_floors: tuple[float, ...] | None) -> dict[str, dict[str, str]]:
    """`provenance.terms` of a preset of `hardware` (its source keys `hardware_sources`); `measured_file`: the
    device file its compute terms were fitted to (None: analytic compute); `host_floors`: floors given."""
    cpu = hardware == "cpu"
    work = _entry("estimate", "rough timings of the tiny model on the development machine") if cpu else \
        _entry("analytic", f"peak FLOP/s and memory bandwidth x efficiency factors [{hardware_sources}]")
    floors = {
        "attention_call_ms": _entry("copied", "h200-measured: the attention call's floor (parts C, K)"),
        "launch_ms": _entry("copied", "h200-measured: the layer's kernels' floor (part L) plus the Hugging Face "
                                      "layer's host work added at every size (part H)"),
        "vision_per_call": _entry("copied", "h200-measured: the Hugging Face vision block's call floor (part HV) "
                                            "x the encoder's depth"),
    }
    if cpu:
        floors = {term: _entry("estimate", "rough timings of the tiny model on the development machine")
                  for term in floors}
    if host_floors is not None:
        given = ["attention_call_ms", "launch_ms"] + (["vision_per_call"] if len(host_floors) > 2 else [])
        floors.update({term: _entry("given", f"host_floors={list(host_floors)}") for term in given})
    terms: dict[str, dict[str, str]] = {
        "attention": work, "ulysses_attention": _entry(work["kind"], "the full heads' attention / d"),
        "linear": work, "output": work, "vision_per_patch": work, **floors,
        "links": _entry("estimate" if cpu else "analytic",
                        f"bandwidth x efficiency + latency per message [{hardware_sources}]"),
        "memory": _entry("analytic", "activation and parameter accounting [kor, megmem, zero]"),
        "step": _entry("analytic", "optimizer bytes over memory bandwidth, FSDP / DDP traffic over the links "
                                   "[nccl-perf, fsdp2, msmm-fsdp2, megmem, zero]"),
    }
    if measured_file is not None:
        measured = {
            "attention": "parts C, K, B, U", "attention_call_ms": "parts C, K", "linear": "part L, raised to the "
            "Hugging Face layer's host floor (part H)", "launch_ms": "part L (the kernels' floor)",
            "vision_per_patch": "part HV (the slope of its larger calls)",
            "vision_per_call": "part HV (its floor and the line of its larger calls)"}
        terms.update({term: _entry("measured", f"{measured_file}: {where}") for term, where in measured.items()})
        terms["ulysses_attention"] = _entry("measured", f"{measured_file}: the full heads' attention / d (part U "
                                                        "scores the rule)")
    return {term: terms[term] for term in TERMS}


def not_measured(provenance: dict[str, Any]) -> list[str]:
    """The terms of a table's `provenance.terms` that were not measured on its own hardware (its estimated ones)."""
    return [term for term, entry in provenance.get("terms", {}).items() if entry.get("kind") != "measured"]
