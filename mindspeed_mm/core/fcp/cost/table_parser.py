"""Validating reader of a profile-table JSON document: every error names the source and the field path."""
from __future__ import annotations

import math
from typing import Any, Callable

from mindspeed_mm.core.fcp.cost.grid import GRID_SCALES, Grid
from mindspeed_mm.core.fcp.cost.shapes import ExpertShape
from mindspeed_mm.core.fcp.cost.table_schema import (
    DEVICES, DTYPES, MASK_TYPES, RECOMPUTE_MODES, SCHEMA_VERSION, HardwareInfo, MemoryFigures, ModelShape,
    ProfileTableError, StepFigures, TimeFigures, VisionShape,
)


def parse_table_fields(doc: Any, source: str) -> dict[str, Any]:
    """The validated `ProfileTable` fields of a JSON document; errors name `source` and the field."""
    return _Parser(source).table(doc)


# Known members of each section (misspelt keys are errors, not silently ignored); `provenance` is free-form.
_KEYS = {
    "<root>": {"schema_version", "hardware", "model", "dtype", "tp", "pp", "recompute", "time", "memory",
               "step", "provenance", "expert_parallel"},
    "hardware": {"name", "device", "ranks_per_node", "memory_bytes", "usable_memory_fraction", "peak_tflops",
                 "intra_node_bytes_per_s", "inter_node_bytes_per_s"},
    "model": {"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "attention_mask",
              "vision", "experts"},
    "model.experts": {"experts", "top_k", "expert_ffn", "shared_expert_ffn"},
    "model.vision": {"depth", "hidden", "heads", "mlp", "patch_size", "spatial_merge", "temporal_patch", "mergers"},
    "time": {"attention_ms", "attention_backward_ratio", "linear_ms_per_token", "linear_backward_ratio",
             "output_ms_per_token", "vision_ms_per_patch", "vision_ms_per_call", "launch_ms", "p2p_ms",
             "all_to_all_ms", "comm_overlap", "linear_ms", "attention_call_ms", "vision_ms", "expert_ms_per_token",
             "expert_exchange_ms"},
    "time.attention_ms": {"causal", "full", "off_diagonal", "ulysses"},
    "time.p2p_ms": {"intra", "inter", "by_group_size"},
    "time.all_to_all_ms": {"intra", "inter", "by_group_size"},
    "memory": {"static_bytes", "workspace_bytes", "activation_bytes_per_token", "vision_activation_bytes_per_token"},
    "step": {"optimizer_ms", "fsdp_round_ms", "replica_reduction_ms", "fsdp_overlap"},
    "grid": {"scale", "x", "y"},
}


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
        mergers = self.positive_int(doc, p, "mergers") if "mergers" in doc else 1
        return VisionShape(**{k: self.positive_int(doc, p, k) for k in (
            "depth", "hidden", "heads", "mlp", "patch_size", "spatial_merge", "temporal_patch")}, mergers=mergers)

    def experts(self, doc: Any) -> ExpertShape | None:
        p = "model.experts"
        if doc is None:
            return None
        doc = self.section(doc, p, p)
        counts = {k: self.positive_int(doc, p, k) for k in ("experts", "top_k", "expert_ffn")}
        if counts["top_k"] > counts["experts"]:
            raise self.fail(f"{p}.top_k", f"at most {p}.experts ({counts['experts']})", counts["top_k"])
        shared = doc.get("shared_expert_ffn", 0)
        if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
            raise self.fail(f"{p}.shared_expert_ffn", "an int >= 0", shared)
        return ExpertShape(**counts, shared_expert_ffn=shared)

    def model(self, doc: Any) -> ModelShape:
        p = "model"
        doc = self.section(doc, p, p)
        ints = {k: self.positive_int(doc, p, k) for k in (
            "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")}
        if ints["heads"] % ints["kv_heads"]:
            raise self.fail("model.kv_heads", f"a divisor of model.heads ({ints['heads']})", ints["kv_heads"])
        return ModelShape(name=self.string(doc, p, "name"), **ints,
                          attention_mask=self.choice(doc, p, "attention_mask", MASK_TYPES),
                          vision=self.vision(self.get(doc, p, "vision")), experts=self.experts(doc.get("experts")))

    def time(self, doc: Any, has_vision: bool) -> TimeFigures:
        p = "time"
        doc = self.section(doc, p, p)
        attention = self.section(self.get(doc, p, "attention_ms"), "time.attention_ms", "time.attention_ms")
        p2p = self.section(self.get(doc, p, "p2p_ms"), "time.p2p_ms", "time.p2p_ms")
        a2a = self.section(self.get(doc, p, "all_to_all_ms"), "time.all_to_all_ms", "time.all_to_all_ms")
        vision_ms = self.non_negative(doc, p, "vision_ms_per_patch")
        if not has_vision and vision_ms != 0:
            raise self.fail("time.vision_ms_per_patch", "0 when model.vision is null", vision_ms)
        vision_call_ms = 0.0 if "vision_ms_per_call" not in doc else self.non_negative(doc, p, "vision_ms_per_call")
        if not has_vision and vision_call_ms != 0:
            raise self.fail("time.vision_ms_per_call", "0 when model.vision is null", vision_call_ms)
        vision_grid = None if "vision_ms" not in doc else self.grid(doc["vision_ms"], "time.vision_ms")
        if not has_vision and vision_grid is not None:
            raise self.fail("time.vision_ms", "absent when model.vision is null", doc["vision_ms"])
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
            vision_ms_per_call=vision_call_ms,
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
            linear_ms=None if "linear_ms" not in doc else self.grid(doc["linear_ms"], "time.linear_ms"),
            attention_call_ms=0.0 if "attention_call_ms" not in doc else self.non_negative(doc, p, "attention_call_ms"),
            vision_ms=vision_grid,
            expert_ms_per_token=0.0 if "expert_ms_per_token" not in doc else self.non_negative(
                doc, p, "expert_ms_per_token"),
            expert_exchange_ms=None if "expert_exchange_ms" not in doc else self.grid(
                doc["expert_exchange_ms"], "time.expert_exchange_ms"),
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

    def step(self, doc: Any) -> StepFigures | None:
        """The optional step section (None when the table does not price the step's own costs)."""
        if doc is None:
            return None
        p = "step"
        doc = self.section(doc, p, p)
        return StepFigures(
            optimizer_ms=self.non_negative(doc, p, "optimizer_ms"),
            fsdp_round_ms=self.non_negative(doc, p, "fsdp_round_ms"),
            replica_reduction_ms=self.non_negative(doc, p, "replica_reduction_ms"),
            fsdp_overlap=1.0 if "fsdp_overlap" not in doc else self.number(
                doc, p, "fsdp_overlap", lambda v: 0 <= v <= 1, "a number in [0, 1]"),
        )

    def table(self, doc: Any) -> dict[str, Any]:
        """The validated `ProfileTable` fields of the whole document."""
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
        expert_parallel = 1 if "expert_parallel" not in doc else self.positive_int(doc, "", "expert_parallel")
        if expert_parallel > 1 and model.experts is None:
            raise self.fail("expert_parallel", "1 for a model without experts (model.experts absent)", expert_parallel)
        if model.experts is not None and model.experts.experts % expert_parallel:
            raise self.fail("expert_parallel", f"a divisor of model.experts.experts ({model.experts.experts})",
                            expert_parallel)
        provenance = self.get(doc, "", "provenance")
        if not isinstance(provenance, dict) or not isinstance(provenance.get("source"), str):
            raise self.fail("provenance", "an object with a string 'source'", provenance)
        return dict(
            hardware=self.hardware(self.get(doc, "", "hardware")),
            model=model,
            dtype=self.choice(doc, "", "dtype", DTYPES),
            tp=tp,
            pp=pp,
            recompute=self.choice(doc, "", "recompute", RECOMPUTE_MODES),
            time=self._expert_time(self.time(self.get(doc, "", "time"), has_vision=model.vision is not None),
                                   model, expert_parallel),
            memory=self.memory(self.get(doc, "", "memory")),
            step=self.step(doc.get("step")),
            provenance=provenance,
            schema_version=SCHEMA_VERSION,
            expert_parallel=expert_parallel,
        )

    def _expert_time(self, time: TimeFigures, model: ModelShape, expert_parallel: int) -> TimeFigures:
        """`time`, after the checks of its expert terms against the model and the expert parallelism."""
        if model.experts is None and time.expert_ms_per_token:
            raise self.fail("time.expert_ms_per_token", "0 for a model without experts", time.expert_ms_per_token)
        if time.expert_ms_per_token > time.linear_ms_per_token:
            raise self.fail("time.expert_ms_per_token", f"at most time.linear_ms_per_token "
                                                        f"({time.linear_ms_per_token}), of which it is a share",
                            time.expert_ms_per_token)
        if (expert_parallel > 1) != (time.expert_exchange_ms is not None):
            raise self.fail("time.expert_exchange_ms", "present exactly when expert_parallel > 1",
                            None if time.expert_exchange_ms is None else "a grid")
        return time
