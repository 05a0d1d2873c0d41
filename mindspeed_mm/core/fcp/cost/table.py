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
- `time.output_ms_per_token`: embedding, LM head and loss, forward + backward, per token.
- `time.vision_ms_per_patch`: the whole vision encoder (and merger), forward + backward, per patch.
- `time.launch_ms`: fixed cost of one forward + backward round of a group.
- `time.p2p_ms.{intra,inter}`: one point-to-point send of `x` bytes between two ranks.
- `time.all_to_all_ms.{intra,inter}`: an all-to-all in which each rank sends `x` bytes in total.
- `time.comm_overlap` (optional, default 1): share of a ring step's transfer that overlaps its
  block compute (1: a step costs max(compute, transfer); 0: compute + transfer).
- `time.{p2p_ms,all_to_all_ms}.by_group_size` (optional): intra-node curves measured on groups of
  exactly that many ranks (keys "2", "3", ...); a group inside a node uses the curve of the listed
  size closest to its own instead of `intra`.
- `memory.*`: bytes per rank (static, workspace) and activation bytes per LLM token.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mindspeed_mm.core.fcp.atomic_io import atomic_write_text
from mindspeed_mm.core.fcp.cost.grid import GRID_SCALES, Grid

SCHEMA_VERSION = 1
DEVICES = ("npu", "cuda", "cpu")
DTYPES = ("bf16", "fp16", "fp32")
RECOMPUTE_MODES = ("none", "full")
MASK_TYPES = ("causal", "full")
LINK_TYPES = ("intra", "inter")


class ProfileTableError(ValueError):
    """A profile table is missing a field or holds a wrong value; the message names file and field."""


@dataclass(frozen=True)
class HardwareInfo:
    """The device and its links, as one rank sees them."""

    name: str
    """Short hardware name, e.g. `a3`."""
    device: str
    """Device kind: one of DEVICES."""
    ranks_per_node: int
    """Ranks sharing the fast intra-node fabric; a group larger than this spans nodes."""
    memory_bytes: int
    """Device memory of one rank in bytes."""
    usable_memory_fraction: float
    """Fraction of `memory_bytes` the training job can really use (runtime, allocator slack)."""
    peak_tflops: float
    """Dense peak of one rank in the table's dtype, TFLOP/s (informational for profiled tables)."""
    intra_node_bytes_per_s: float
    """Nominal one-direction point-to-point bandwidth inside a node, bytes/s (informational)."""
    inter_node_bytes_per_s: float
    """Nominal one-direction bandwidth per rank between nodes, bytes/s (informational)."""


@dataclass(frozen=True)
class VisionShape:
    """Shape of the vision encoder."""

    depth: int
    """Number of vision transformer blocks."""
    hidden: int
    """Vision hidden size."""
    heads: int
    """Vision attention heads."""
    mlp: int
    """Vision MLP intermediate size."""
    patch_size: int
    """Patch side in pixels."""
    spatial_merge: int
    """Patches merged per side into one LLM token (merge**2 patches per token)."""
    temporal_patch: int
    """Frames folded into one patch along time (1 for images-as-tiles)."""


@dataclass(frozen=True)
class ModelShape:
    """Shape of the language model (and optional vision encoder)."""

    name: str
    """Short model name, e.g. `qwen3vl-8b`."""
    layers: int
    """Transformer layers of the LLM (all pipeline stages together)."""
    hidden: int
    """LLM hidden size."""
    heads: int
    """Query heads (before TP)."""
    kv_heads: int
    """Key/value heads (before TP)."""
    head_dim: int
    """Size of one attention head."""
    ffn: int
    """MLP intermediate size."""
    vocab: int
    """Vocabulary size."""
    attention_mask: str
    """Mask of the LLM attention: one of MASK_TYPES."""
    vision: VisionShape | None
    """Vision encoder shape, or None for a text-only model."""


@dataclass(frozen=True)
class TimeFigures:
    """Time grids and per-unit costs (milliseconds) of one rank; see the module docstring."""

    attention_causal_ms: Grid
    """Causal attention core of one layer, forward + backward, vs document tokens."""
    attention_full_ms: Grid
    """Full-mask attention core of one layer, forward + backward, vs document tokens."""
    attention_backward_ratio: float
    """Backward time / forward time of the attention core."""
    linear_ms_per_token: float
    """Non-attention work of one layer, forward + backward, per token."""
    linear_backward_ratio: float
    """Backward time / forward time of the non-attention work."""
    output_ms_per_token: float
    """Embedding + LM head + loss, forward + backward, per token."""
    vision_ms_per_patch: float
    """Vision encoder + merger, forward + backward, per patch (0 without a vision encoder)."""
    launch_ms: float
    """Fixed cost of one group's forward + backward round."""
    p2p_intra_ms: Grid
    """One point-to-point message inside a node vs bytes."""
    p2p_inter_ms: Grid
    """One point-to-point message between nodes vs bytes."""
    all_to_all_intra_ms: Grid
    """All-to-all inside a node vs bytes sent by each rank."""
    all_to_all_inter_ms: Grid
    """All-to-all across nodes vs bytes each rank sends to other nodes."""
    attention_off_diagonal_ms: Grid | None = None
    """Off-diagonal block of a causal ring step vs the document's tokens on the rank (None: the causal grid)."""
    comm_overlap: float = 1.0
    """Share of a ring step's transfer hidden behind its block compute, in [0, 1]."""
    p2p_by_group_size_ms: dict[int, Grid] | None = None
    """Intra-node point-to-point curves per group size (None: `p2p_intra_ms` for every size)."""
    all_to_all_by_group_size_ms: dict[int, Grid] | None = None
    """Intra-node all-to-all curves per group size (None: `all_to_all_intra_ms` for every size)."""
    attention_ulysses_ms: dict[int, Grid] | None = None
    """Per Ulysses degree: one rank's attention (model mask, heads / d heads) vs document tokens."""

    def attention_ms(self, mask: str) -> Grid:
        """The attention grid of a mask type."""
        return self.attention_causal_ms if mask == "causal" else self.attention_full_ms


@dataclass(frozen=True)
class MemoryFigures:
    """Memory figures of one rank, bytes."""

    static_bytes: float
    """Parameters, gradients and optimizer state held by the rank."""
    workspace_bytes: float
    """Fixed working memory: communication buffers, gathered parameters, runtime."""
    activation_bytes_per_token: float
    """LLM activations kept for backward, per LLM token held by the rank."""
    vision_activation_bytes_per_token: float
    """Vision-encoder activations per LLM token, counted as if every token were a vision token."""


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
    provenance: dict[str, Any] = field(default_factory=dict)
    """Where the figures come from: `source` (required) plus free-form notes and references."""
    schema_version: int = SCHEMA_VERSION
    """Version of the JSON schema."""

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
            "model": {**{k: v for k, v in vars(self.model).items() if k != "vision"},
                      "vision": dict(vars(vision)) if vision is not None else None},
            "dtype": self.dtype,
            "tp": self.tp,
            "pp": self.pp,
            "recompute": self.recompute,
            "time": {
                "attention_ms": {"causal": t.attention_causal_ms.to_dict(),
                                 "full": t.attention_full_ms.to_dict(),
                                 **({} if t.attention_off_diagonal_ms is None
                                    else {"off_diagonal": t.attention_off_diagonal_ms.to_dict()}),
                                 **({} if t.attention_ulysses_ms is None
                                    else {"ulysses": _grids_doc(t.attention_ulysses_ms)})},
                "attention_backward_ratio": t.attention_backward_ratio,
                "linear_ms_per_token": t.linear_ms_per_token,
                "linear_backward_ratio": t.linear_backward_ratio,
                "output_ms_per_token": t.output_ms_per_token,
                "vision_ms_per_patch": t.vision_ms_per_patch,
                "launch_ms": t.launch_ms,
                "p2p_ms": {"intra": t.p2p_intra_ms.to_dict(), "inter": t.p2p_inter_ms.to_dict(),
                           **_by_size_doc(t.p2p_by_group_size_ms)},
                "all_to_all_ms": {"intra": t.all_to_all_intra_ms.to_dict(),
                                  "inter": t.all_to_all_inter_ms.to_dict(),
                                  **_by_size_doc(t.all_to_all_by_group_size_ms)},
                **({} if t.comm_overlap == 1.0 else {"comm_overlap": t.comm_overlap}),
            },
            "memory": dict(vars(self.memory)),
            "provenance": self.provenance,
        }

    @classmethod
    def from_dict(cls, doc: Any, source: str = "<dict>") -> "ProfileTable":
        """Parse and validate a JSON document; errors name `source` and the field."""
        return _Parser(source).table(doc)

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


# Known members of each section (misspelt keys are errors, not silently ignored); `provenance` is free-form.
_KEYS = {
    "<root>": {"schema_version", "hardware", "model", "dtype", "tp", "pp", "recompute", "time", "memory",
               "provenance"},
    "hardware": {"name", "device", "ranks_per_node", "memory_bytes", "usable_memory_fraction", "peak_tflops",
                 "intra_node_bytes_per_s", "inter_node_bytes_per_s"},
    "model": {"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "attention_mask",
              "vision"},
    "model.vision": {"depth", "hidden", "heads", "mlp", "patch_size", "spatial_merge", "temporal_patch"},
    "time": {"attention_ms", "attention_backward_ratio", "linear_ms_per_token", "linear_backward_ratio",
             "output_ms_per_token", "vision_ms_per_patch", "launch_ms", "p2p_ms", "all_to_all_ms", "comm_overlap"},
    "time.attention_ms": {"causal", "full", "off_diagonal", "ulysses"},
    "time.p2p_ms": {"intra", "inter", "by_group_size"},
    "time.all_to_all_ms": {"intra", "inter", "by_group_size"},
    "memory": {"static_bytes", "workspace_bytes", "activation_bytes_per_token", "vision_activation_bytes_per_token"},
    "grid": {"scale", "x", "y"},
}


def _grids_doc(grids: dict[int, Grid]) -> dict[str, Any]:
    """Grids keyed by a group size or degree, as JSON (string keys)."""
    return {str(size): grid.to_dict() for size, grid in sorted(grids.items())}


def _by_size_doc(grids: dict[int, Grid] | None) -> dict[str, Any]:
    """The JSON entry of per-group-size grids (nothing when there are none)."""
    return {} if grids is None else {"by_group_size": _grids_doc(grids)}


class _Parser:
    """Validating reader of a table document; every error names the source and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, expectation: str, value: Any) -> ProfileTableError:
        return ProfileTableError(f"{self.source}: field '{path}' must be {expectation}, got {value!r}")

    def section(self, doc: Any, path: str, keys: str | None = None) -> dict[str, Any]:
        """`doc` as an object; with `keys` (a `_KEYS` entry), members outside it are errors."""
        if not isinstance(doc, dict):
            raise self.fail(path, "an object", doc)
        unknown = sorted(set(doc) - _KEYS[keys]) if keys is not None else []
        if unknown:
            where = "the top level" if path == "<root>" else f"'{path}'"
            raise ProfileTableError(f"{self.source}: unknown field {unknown[0]!r} in {where}; expected one of "
                                    f"{sorted(_KEYS[keys])}")
        return doc

    def get(self, doc: dict[str, Any], path: str, key: str) -> Any:
        full = f"{path}.{key}" if path else key
        if key not in doc:
            raise ProfileTableError(f"{self.source}: missing field '{full}'")
        return doc[key]

    def positive_int(self, doc: dict[str, Any], path: str, key: str) -> int:
        value = self.get(doc, path, key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(f"{path}.{key}" if path else key, "a positive int", value)
        return value

    def number(self, doc: dict[str, Any], path: str, key: str,
               check: Callable[[float], bool], expectation: str) -> float:
        value = self.get(doc, path, key)
        full = f"{path}.{key}" if path else key
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not check(float(value)):
            raise self.fail(full, expectation, value)
        return float(value)

    def non_negative(self, doc: dict[str, Any], path: str, key: str) -> float:
        return self.number(doc, path, key, lambda v: v >= 0, "a finite number >= 0")

    def positive(self, doc: dict[str, Any], path: str, key: str) -> float:
        return self.number(doc, path, key, lambda v: v > 0, "a finite number > 0")

    def string(self, doc: dict[str, Any], path: str, key: str) -> str:
        value = self.get(doc, path, key)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{path}.{key}", "a non-empty string", value)
        return value

    def choice(self, doc: dict[str, Any], path: str, key: str, choices: tuple[str, ...]) -> str:
        value = self.get(doc, path, key)
        if value not in choices:
            raise self.fail(f"{path}.{key}" if path else key, f"one of {list(choices)}", value)
        return value

    def grid(self, doc: Any, path: str) -> Grid:
        doc = self.section(doc, path, "grid")
        scale = self.choice(doc, path, "scale", GRID_SCALES)
        xs, ys = self.get(doc, path, "x"), self.get(doc, path, "y")
        for key, values in (("x", xs), ("y", ys)):
            if not isinstance(values, list) or len(values) < 2:
                raise self.fail(f"{path}.{key}", "a list of at least 2 numbers", values)
            for i, v in enumerate(values):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise self.fail(f"{path}.{key}[{i}]", "a finite number >= 0", v)
        if len(xs) != len(ys):
            raise self.fail(f"{path}.y", f"a list as long as '{path}.x' ({len(xs)})", ys)
        for i in range(len(xs)):
            if xs[i] <= 0:
                raise self.fail(f"{path}.x[{i}]", "> 0", xs[i])
            if scale == "loglog" and ys[i] <= 0:
                raise self.fail(f"{path}.y[{i}]", "> 0 on a loglog grid", ys[i])
            if i and xs[i] <= xs[i - 1]:
                raise self.fail(f"{path}.x[{i}]", f"greater than x[{i - 1}]={xs[i - 1]!r} (strictly increasing)",
                                xs[i])
            if i and ys[i] < ys[i - 1]:
                raise self.fail(f"{path}.y[{i}]", f">= y[{i - 1}]={ys[i - 1]!r} (monotone non-decreasing)",
                                ys[i])
        return Grid(tuple(float(v) for v in xs), tuple(float(v) for v in ys), scale)

    def hardware(self, doc: Any) -> HardwareInfo:
        p = "hardware"
        doc = self.section(doc, p, p)
        return HardwareInfo(
            name=self.string(doc, p, "name"),
            device=self.choice(doc, p, "device", DEVICES),
            ranks_per_node=self.positive_int(doc, p, "ranks_per_node"),
            memory_bytes=self.positive_int(doc, p, "memory_bytes"),
            usable_memory_fraction=self.number(doc, p, "usable_memory_fraction", lambda v: 0 < v <= 1,
                                               "a number in (0, 1]"),
            peak_tflops=self.positive(doc, p, "peak_tflops"),
            intra_node_bytes_per_s=self.positive(doc, p, "intra_node_bytes_per_s"),
            inter_node_bytes_per_s=self.positive(doc, p, "inter_node_bytes_per_s"),
        )

    def vision(self, doc: Any) -> VisionShape | None:
        p = "model.vision"
        if doc is None:
            return None
        doc = self.section(doc, p, p)
        return VisionShape(**{k: self.positive_int(doc, p, k) for k in (
            "depth", "hidden", "heads", "mlp", "patch_size", "spatial_merge", "temporal_patch")})

    def model(self, doc: Any) -> ModelShape:
        p = "model"
        doc = self.section(doc, p, p)
        ints = {k: self.positive_int(doc, p, k) for k in (
            "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")}
        if ints["heads"] % ints["kv_heads"]:
            raise self.fail("model.kv_heads", f"a divisor of model.heads ({ints['heads']})", ints["kv_heads"])
        return ModelShape(name=self.string(doc, p, "name"), **ints,
                          attention_mask=self.choice(doc, p, "attention_mask", MASK_TYPES),
                          vision=self.vision(self.get(doc, p, "vision")))

    def time(self, doc: Any, has_vision: bool) -> TimeFigures:
        p = "time"
        doc = self.section(doc, p, p)
        attention = self.section(self.get(doc, p, "attention_ms"), "time.attention_ms", "time.attention_ms")
        p2p = self.section(self.get(doc, p, "p2p_ms"), "time.p2p_ms", "time.p2p_ms")
        a2a = self.section(self.get(doc, p, "all_to_all_ms"), "time.all_to_all_ms", "time.all_to_all_ms")
        vision_ms = self.non_negative(doc, p, "vision_ms_per_patch")
        if not has_vision and vision_ms != 0:
            raise self.fail("time.vision_ms_per_patch", "0 when model.vision is null", vision_ms)
        return TimeFigures(
            attention_causal_ms=self.grid(self.get(attention, "time.attention_ms", "causal"),
                                          "time.attention_ms.causal"),
            attention_full_ms=self.grid(self.get(attention, "time.attention_ms", "full"),
                                        "time.attention_ms.full"),
            attention_backward_ratio=self.positive(doc, p, "attention_backward_ratio"),
            linear_ms_per_token=self.positive(doc, p, "linear_ms_per_token"),
            linear_backward_ratio=self.positive(doc, p, "linear_backward_ratio"),
            output_ms_per_token=self.non_negative(doc, p, "output_ms_per_token"),
            vision_ms_per_patch=vision_ms,
            launch_ms=self.non_negative(doc, p, "launch_ms"),
            p2p_intra_ms=self.grid(self.get(p2p, "time.p2p_ms", "intra"), "time.p2p_ms.intra"),
            p2p_inter_ms=self.grid(self.get(p2p, "time.p2p_ms", "inter"), "time.p2p_ms.inter"),
            all_to_all_intra_ms=self.grid(self.get(a2a, "time.all_to_all_ms", "intra"),
                                          "time.all_to_all_ms.intra"),
            all_to_all_inter_ms=self.grid(self.get(a2a, "time.all_to_all_ms", "inter"),
                                          "time.all_to_all_ms.inter"),
            attention_off_diagonal_ms=None if "off_diagonal" not in attention else self.grid(
                attention["off_diagonal"], "time.attention_ms.off_diagonal"),
            comm_overlap=1.0 if "comm_overlap" not in doc else self.number(
                doc, p, "comm_overlap", lambda v: 0 <= v <= 1, "a number in [0, 1]"),
            p2p_by_group_size_ms=self.keyed_grids(p2p, "time.p2p_ms", "by_group_size"),
            all_to_all_by_group_size_ms=self.keyed_grids(a2a, "time.all_to_all_ms", "by_group_size"),
            attention_ulysses_ms=self.keyed_grids(attention, "time.attention_ms", "ulysses"),
        )

    def keyed_grids(self, doc: dict[str, Any], path: str, key: str) -> dict[int, Grid] | None:
        """Optional grids keyed by a group size or degree (>= 2, written as strings)."""
        if key not in doc:
            return None
        full = f"{path}.{key}"
        section = self.section(doc[key], full)
        if not section:
            raise self.fail(full, "a non-empty object", section)
        grids = {}
        for key, grid in section.items():
            # Canonical decimal keys only: "02" and "2" would otherwise name the same size.
            if not (isinstance(key, str) and key.isdigit() and int(key) >= 2 and key == str(int(key))):
                raise self.fail(full, "keyed by group sizes >= 2 written as strings without leading zeros", key)
            grids[int(key)] = self.grid(grid, f"{full}.{key}")
        return dict(sorted(grids.items()))

    def memory(self, doc: Any) -> MemoryFigures:
        p = "memory"
        doc = self.section(doc, p, p)
        return MemoryFigures(
            static_bytes=self.non_negative(doc, p, "static_bytes"),
            workspace_bytes=self.non_negative(doc, p, "workspace_bytes"),
            activation_bytes_per_token=self.positive(doc, p, "activation_bytes_per_token"),
            vision_activation_bytes_per_token=self.non_negative(doc, p, "vision_activation_bytes_per_token"),
        )

    def table(self, doc: Any) -> ProfileTable:
        doc = self.section(doc, "<root>", "<root>")
        version = self.get(doc, "", "schema_version")
        if version != SCHEMA_VERSION:
            raise self.fail("schema_version", f"{SCHEMA_VERSION} (the only supported version)", version)
        model = self.model(self.get(doc, "", "model"))
        tp = self.positive_int(doc, "", "tp")
        pp = self.positive_int(doc, "", "pp")
        if model.heads % tp or model.kv_heads % tp:
            raise self.fail("tp", f"a divisor of model.heads ({model.heads}) and model.kv_heads "
                                  f"({model.kv_heads})", tp)
        if model.layers % pp:
            raise self.fail("pp", f"a divisor of model.layers ({model.layers})", pp)
        provenance = self.get(doc, "", "provenance")
        if not isinstance(provenance, dict) or not isinstance(provenance.get("source"), str):
            raise self.fail("provenance", "an object with a string 'source'", provenance)
        return ProfileTable(
            hardware=self.hardware(self.get(doc, "", "hardware")),
            model=model,
            dtype=self.choice(doc, "", "dtype", DTYPES),
            tp=tp,
            pp=pp,
            recompute=self.choice(doc, "", "recompute", RECOMPUTE_MODES),
            time=self.time(self.get(doc, "", "time"), has_vision=model.vision is not None),
            memory=self.memory(self.get(doc, "", "memory")),
            provenance=provenance,
            schema_version=SCHEMA_VERSION,
        )
