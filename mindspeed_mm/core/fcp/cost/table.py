"""The versioned JSON profile table: everything the cost model knows about one training setup.

A table describes one (hardware, model shape, dtype, TP, PP, recompute) combination. Its time
figures are per rank of a group, for that rank's TP/PP shard of the model:

- `time.attention_ms.{causal,full}`: forward + backward (no recompute) of the attention core of
  ONE transformer layer over one document of `x` tokens, all of the rank's heads.
- `time.attention_ms.off_diagonal` (optional): forward + backward of the off-diagonal block a
  causal ring step computes for a document whose shard on the rank holds `x` tokens (x query
  rows against x/2 key rows, no mask). Absent: such a block costs what the causal grid says for
  `x` tokens, as on kernels that skip masked work.
- `time.attention_ms.ulysses` (optional): per degree d (keys "2", "4", ...), forward + backward of
  one layer's attention over one document of `x` tokens on one rank of a Ulysses group of d, i.e.
  with that rank's heads / d heads (kernels lose efficiency on fewer heads). Absent for a degree:
  the model mask's grid divided by d.
- `time.linear_ms_per_token`: forward + backward of everything else in one layer (projections,
  MLP, norms, TP collectives) per token.
- `time.linear_ms` (optional): the same work against the tokens `x` a rank holds, above the
  layer's fixed cost (which `launch_ms` carries): measured points, so that small shards, whose
  kernels run below peak, cost what they cost. Absent: `linear_ms_per_token` x `x`.
- `time.output_ms_per_token`: embedding, LM head and loss, forward + backward, per token.
- `time.vision_ms_per_patch`: the whole vision encoder (and merger), forward + backward, per patch.
- `time.vision_ms_per_call` (optional, default 0): the encoder's fixed cost of one call on one rank
  (every rank of a group holding patches encodes its share in one call per round).
- `time.vision_ms` (optional): the encoder's forward + backward of one call on one rank against the
  patches `x` it encodes, fixed cost included; replaces `vision_ms_per_call` + `vision_ms_per_patch`.
- `time.attention_call_ms` (optional, default 0): the least one attention call of one layer on one rank
  costs, forward + backward; a call costs the larger of it and the sum of its documents' grid times.
- `time.launch_ms`: fixed cost of one forward + backward round of a group.
- `time.expert_ms_per_token` (optional, default 0): a mixture-of-experts model's routed experts' share of
  `linear_ms_per_token`.
- `time.expert_exchange_ms` (optional): with `expert_parallel` > 1, the dispatch and combine all-to-alls of one
  layer, forward + backward, vs the tokens a rank holds.
- `time.p2p_ms.{intra,inter}`: one point-to-point send of `x` bytes between two ranks.
- `time.all_to_all_ms.{intra,inter}`: an all-to-all in which each rank sends `x` bytes in total.
- `time.comm_overlap` (optional, default 1): share of a ring step's transfer that overlaps its
  block compute (1: a step costs max(compute, transfer); 0: compute + transfer).
- `time.{p2p_ms,all_to_all_ms}.by_group_size` (optional): intra-node curves measured on groups of
  exactly that many ranks (keys "2", "3", ...); a group inside a node uses the curve of the listed
  size closest to its own instead of `intra`.
- `model.experts` (optional): a mixture-of-experts decoder's router and experts of every layer (`experts`,
  `top_k`, `expert_ffn`, `shared_expert_ffn`); absent for a dense one.
- `expert_parallel` (optional, default 1): ranks a mixture-of-experts model's experts are split over
  (`model.experts`: the router and experts of every layer).
- `memory.*`: bytes per rank (static, workspace) and activation bytes per LLM token.
- `step.*` (optional): costs of a step outside the groups' passes, ms, for the run's ranks: the
  optimizer step, one FSDP round's parameter traffic (a round's floor) and the once-per-step
  reduction of replicas (DDP / distributed optimizer). Absent: the step's own costs are not priced.
  `step.fsdp_overlap` (optional, default 1): share of the shorter of a round's pass and its FSDP
  traffic that the longer hides (1: a round lasts max(pass, traffic); 0: pass + traffic).

The typed sections live in `table_schema` and the validating reader of a document in `table_parser`;
this module holds the table itself and its JSON load / save (all their names import from here).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mindspeed_mm.core.fcp.atomic_io import atomic_write_text
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.table_parser import parse_table_fields
from mindspeed_mm.core.fcp.cost.table_schema import (
    DEVICES, DTYPES, LINK_TYPES, MASK_TYPES, RECOMPUTE_MODES, SCHEMA_VERSION, HardwareInfo, MemoryFigures,
    ModelShape, ProfileTableError, StepFigures, TimeFigures, VisionShape,
)

__all__ = ["DEVICES", "DTYPES", "LINK_TYPES", "MASK_TYPES", "RECOMPUTE_MODES", "SCHEMA_VERSION", "HardwareInfo",
           "MemoryFigures", "ModelShape", "ProfileTable", "ProfileTableError", "StepFigures", "TimeFigures",
           "VisionShape"]


@dataclass(frozen=True)
class ProfileTable:
    """One versioned profile table (see the module docstring for the meaning of every figure)."""

    hardware: HardwareInfo
    """Device and links."""
    model: ModelShape
    """Model shape."""
    dtype: str
    """Training dtype of activations and parameters: one of DTYPES."""
    tp: int
    """Fixed tensor-parallel size the figures were taken with."""
    pp: int
    """Fixed pipeline-parallel size the figures were taken with."""
    recompute: str
    """Activation recompute: one of RECOMPUTE_MODES (`full` adds one forward pass)."""
    time: TimeFigures
    """Time figures."""
    memory: MemoryFigures
    """Memory figures."""
    step: StepFigures | None = None
    """Costs of the step outside the groups' passes (None: not priced)."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """Where the figures come from: `source` (required) plus free-form notes and references."""
    schema_version: int = SCHEMA_VERSION
    """Version of the JSON schema."""
    expert_parallel: int = 1
    """Ranks the experts of a mixture-of-experts model are split over (1: every rank runs every expert)."""

    @property
    def layers_per_stage(self) -> int:
        """Transformer layers on one pipeline stage."""
        return self.model.layers // self.pp

    def validate(self, source: str = "<table>") -> None:
        """Raise ProfileTableError if any field is missing or wrong."""
        ProfileTable.from_dict(self.to_dict(), source=source)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of this table."""
        t = self.time
        vision = self.model.vision
        return {
            "schema_version": self.schema_version,
            "hardware": dict(vars(self.hardware)),
            "model": {**{k: v for k, v in vars(self.model).items() if k not in ("vision", "experts")},
                      "vision": dict(vars(vision)) if vision is not None else None,
                      **({} if self.model.experts is None else {"experts": dict(vars(self.model.experts))})},
            "dtype": self.dtype,
            "tp": self.tp,
            "pp": self.pp,
            "recompute": self.recompute,
            **({} if self.expert_parallel == 1 else {"expert_parallel": self.expert_parallel}),
            "time": {
                "attention_ms": {"causal": t.attention_causal_ms.to_dict(),
                                 "full": t.attention_full_ms.to_dict(),
                                 **({} if t.attention_off_diagonal_ms is None
                                    else {"off_diagonal": t.attention_off_diagonal_ms.to_dict()}),
                                 **({} if t.attention_ulysses_ms is None
                                    else {"ulysses": _grids_doc(t.attention_ulysses_ms)})},
                "attention_backward_ratio": t.attention_backward_ratio,
                "linear_ms_per_token": t.linear_ms_per_token,
                **({} if t.linear_ms is None else {"linear_ms": t.linear_ms.to_dict()}),
                **({} if t.attention_call_ms == 0.0 else {"attention_call_ms": t.attention_call_ms}),
                **({} if t.vision_ms is None else {"vision_ms": t.vision_ms.to_dict()}),
                "linear_backward_ratio": t.linear_backward_ratio,
                "output_ms_per_token": t.output_ms_per_token,
                "vision_ms_per_patch": t.vision_ms_per_patch,
                **({} if t.vision_ms_per_call == 0.0 else {"vision_ms_per_call": t.vision_ms_per_call}),
                "launch_ms": t.launch_ms,
                "p2p_ms": {"intra": t.p2p_intra_ms.to_dict(), "inter": t.p2p_inter_ms.to_dict(),
                           **_by_size_doc(t.p2p_by_group_size_ms)},
                "all_to_all_ms": {"intra": t.all_to_all_intra_ms.to_dict(),
                                  "inter": t.all_to_all_inter_ms.to_dict(),
                                  **_by_size_doc(t.all_to_all_by_group_size_ms)},
                **({} if t.comm_overlap == 1.0 else {"comm_overlap": t.comm_overlap}),
                **({} if t.expert_ms_per_token == 0.0 else {"expert_ms_per_token": t.expert_ms_per_token}),
                **({} if t.expert_exchange_ms is None else {"expert_exchange_ms": t.expert_exchange_ms.to_dict()}),
            },
            "memory": dict(vars(self.memory)),
            **({} if self.step is None else {"step": _step_doc(self.step)}),
            "provenance": self.provenance,
        }

    @classmethod
    def from_dict(cls, doc: Any, source: str = "<dict>") -> "ProfileTable":
        """Parse and validate a JSON document; errors name `source` and the field."""
        return ProfileTable(**parse_table_fields(doc, source))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "ProfileTable":
        """Read and validate a table from a JSON file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileTableError(f"{path}: cannot read profile table: {exc}") from exc
        try:
            doc = json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, path))
        except json.JSONDecodeError as exc:
            raise ProfileTableError(f"{path}: not valid JSON: {exc}") from exc
        return cls.from_dict(doc, source=str(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the table as JSON atomically (temporary file in the same folder, then rename)."""
        path = Path(path)
        self.validate(source=str(path))
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")


def _unique_keys(pairs: list[tuple[str, Any]], path: Path) -> dict[str, Any]:
    """A JSON object's members; a key given twice is an error (json keeps the last one silently)."""
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise ProfileTableError(f"{path}: key {key!r} appears twice in one object")
        doc[key] = value
    return doc


def _grids_doc(grids: dict[int, Grid]) -> dict[str, Any]:
    """Grids keyed by a group size or degree, as JSON (string keys)."""
    return {str(size): grid.to_dict() for size, grid in sorted(grids.items())}


def _by_size_doc(grids: dict[int, Grid] | None) -> dict[str, Any]:
    """The JSON entry of per-group-size grids (nothing when there are none)."""
    return {} if grids is None else {"by_group_size": _grids_doc(grids)}


def _step_doc(step: StepFigures) -> dict[str, float]:
    """The JSON `step` section (`fsdp_overlap` only where it is not the default 1)."""
    doc = dict(vars(step))
    if step.fsdp_overlap == 1.0:
        del doc["fsdp_overlap"]
    return doc
