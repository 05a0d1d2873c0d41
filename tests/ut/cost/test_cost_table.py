"""Profile table: JSON round trip, atomic save, and every validation rule naming file and field."""
from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from mindspeed_mm.core.fcp.cost import ProfileTable, ProfileTableError, build_preset_table


@pytest.fixture(scope="module")
def table() -> ProfileTable:
    return build_preset_table("a3", "qwen3vl-8b")


@pytest.fixture()
def doc(table: ProfileTable) -> dict[str, Any]:
    return copy.deepcopy(table.to_dict())


def test_dict_round_trip(table: ProfileTable) -> None:
    again = ProfileTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again == table


def test_save_load_round_trip(table: ProfileTable, tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    table.save(path)
    assert ProfileTable.load(path) == table
    assert json.loads(path.read_text())["schema_version"] == 1
    assert sorted(os.listdir(tmp_path)) == ["profile.json"]


def test_save_is_atomic(table: ProfileTable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "profile.json"
    path.write_text("previous content")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        table.save(path)
    assert path.read_text() == "previous content"
    assert sorted(os.listdir(tmp_path)) == ["profile.json"]


def test_exact_message_names_file_and_field(doc: dict[str, Any], tmp_path: Path) -> None:
    doc["hardware"]["ranks_per_node"] = -1
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileTableError) as err:
        ProfileTable.load(path)
    assert str(err.value) == f"{path}: field 'hardware.ranks_per_node' must be a positive int, got -1"


def test_error_is_a_value_error() -> None:
    assert issubclass(ProfileTableError, ValueError)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return apply


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for key in parents:
            node = node[key]
        del node[last]
    return apply


CASES = [
    # (change, expected fragment of the message)
    (_delete("hardware.ranks_per_node"), "missing field 'hardware.ranks_per_node'"),
    (_delete("schema_version"), "missing field 'schema_version'"),
    (_delete("time.attention_ms.causal"), "missing field 'time.attention_ms.causal'"),
    (_delete("memory"), "missing field 'memory'"),
    (_set("hardware.ranks_per_node", 2.5), "field 'hardware.ranks_per_node' must be a positive int, got 2.5"),
    (_set("hardware.ranks_per_node", True), "field 'hardware.ranks_per_node' must be a positive int, got True"),
    (_set("hardware.memory_bytes", "64GB"), "field 'hardware.memory_bytes' must be a positive int"),
    (_set("hardware.device", "tpu"), "field 'hardware.device' must be one of ['npu', 'cuda', 'cpu'], got 'tpu'"),
    (_set("hardware.usable_memory_fraction", 1.5),
     "field 'hardware.usable_memory_fraction' must be a number in (0, 1]"),
    (_set("hardware.peak_tflops", 0), "field 'hardware.peak_tflops' must be a finite number > 0"),
    (_set("hardware.name", ""), "field 'hardware.name' must be a non-empty string"),
    (_set("hardware", []), "field 'hardware' must be an object"),
    (_set("schema_version", 2), "field 'schema_version' must be 1 (the only supported version), got 2"),
    (_set("dtype", "int8"), "field 'dtype' must be one of ['bf16', 'fp16', 'fp32'], got 'int8'"),
    (_set("recompute", "selective"), "field 'recompute' must be one of ['none', 'full']"),
    (_set("tp", 3), "field 'tp' must be a divisor of model.heads (32) and model.kv_heads (8), got 3"),
    (_set("pp", 5), "field 'pp' must be a divisor of model.layers (36), got 5"),
    (_set("model.kv_heads", 6), "field 'model.kv_heads' must be a divisor of model.heads (32), got 6"),
    (_set("model.attention_mask", "sliding"), "field 'model.attention_mask' must be one of ['causal', 'full']"),
    (_set("model.vision.depth", 0), "field 'model.vision.depth' must be a positive int, got 0"),
    (_set("time.linear_ms_per_token", -1.0), "field 'time.linear_ms_per_token' must be a finite number > 0"),
    (_set("time.launch_ms", math.nan), "field 'time.launch_ms' must be a finite number >= 0"),
    (_set("memory.static_bytes", -5), "field 'memory.static_bytes' must be a finite number >= 0, got -5"),
    (_set("time.p2p_ms.intra.scale", "cubic"), "field 'time.p2p_ms.intra.scale' must be one of ['linear', 'loglog']"),
    (_set("time.p2p_ms.intra.y.3", 0.0), "field 'time.p2p_ms.intra.y[3]' must be >= y[2]="),
    (_set("time.p2p_ms.inter.x.2", 1.0), "field 'time.p2p_ms.inter.x[2]' must be greater than x[1]="),
    (_set("time.all_to_all_ms.intra.x", [1.0]), "field 'time.all_to_all_ms.intra.x' must be a list of at least 2"),
    (_set("time.all_to_all_ms.inter.y", [1.0, 2.0]), "field 'time.all_to_all_ms.inter.y' must be a list as long as"),
    (_set("time.attention_ms.full.y.0", 0.0), "field 'time.attention_ms.full.y[0]' must be > 0 on a loglog grid"),
    (_set("time.attention_ms.causal.x.0", "64"), "field 'time.attention_ms.causal.x[0]' must be a finite number >= 0"),
    (_set("time.attention_ms.causal.x.0", 0.0), "field 'time.attention_ms.causal.x[0]' must be > 0, got 0.0"),
    (_set("provenance", {}), "field 'provenance' must be an object with a string 'source'"),
]


@pytest.mark.parametrize("change, fragment", CASES, ids=[c[1][:60] for c in CASES])
def test_validation_rule(doc: dict[str, Any], change: Callable[[dict[str, Any]], None], fragment: str) -> None:
    change(doc)
    with pytest.raises(ProfileTableError) as err:
        ProfileTable.from_dict(doc, source="profile.json")
    message = str(err.value)
    assert message.startswith("profile.json: "), message
    assert fragment in message, message


def test_vision_time_needs_vision_shape(doc: dict[str, Any]) -> None:
    doc["model"]["vision"] = None
    with pytest.raises(ProfileTableError, match=r"'time.vision_ms_per_patch' must be 0 when model.vision is null"):
        ProfileTable.from_dict(doc, source="t.json")
    doc["time"]["vision_ms_per_patch"] = 0.0
    doc["time"]["vision_ms_per_call"] = 1.0
    with pytest.raises(ProfileTableError, match=r"'time.vision_ms_per_call' must be 0 when model.vision is null"):
        ProfileTable.from_dict(doc, source="t.json")
    del doc["time"]["vision_ms_per_call"]
    assert ProfileTable.from_dict(doc).model.vision is None


def test_root_must_be_object() -> None:
    with pytest.raises(ProfileTableError, match=r"x.json: field '<root>' must be an object"):
        ProfileTable.from_dict([1, 2], source="x.json")


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(ProfileTableError, match="none.json: cannot read profile table"):
        ProfileTable.load(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileTableError, match="bad.json: not valid JSON"):
        ProfileTable.load(bad)


def test_validate_catches_a_bad_instance(table: ProfileTable) -> None:
    import dataclasses

    broken = dataclasses.replace(table, tp=0)
    with pytest.raises(ProfileTableError, match="field 'tp' must be a positive int, got 0"):
        broken.validate()


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda d: d["time"].update(comm_overlapp=0.5), "unknown field 'comm_overlapp' in 'time'"),
        (lambda d: d["hardware"].update(ranks_per_nod=8), "unknown field 'ranks_per_nod' in 'hardware'"),
        (lambda d: d.update(schema_versoin=1), "unknown field 'schema_versoin' in the top level"),
        (lambda d: d["time"]["attention_ms"]["causal"].update(scales="linear"),
         "unknown field 'scales' in 'time.attention_ms.causal'"),
        (lambda d: d["memory"].update(static_byte=1), "unknown field 'static_byte' in 'memory'"),
    ],
)
def test_misspelt_keys_are_rejected_naming_them(doc: dict[str, Any], change: Callable[[dict[str, Any]], None],
                                                fragment: str) -> None:
    change(doc)
    with pytest.raises(ProfileTableError, match=fragment):
        ProfileTable.from_dict(doc, source="t.json")


def test_duplicate_keys_in_a_file_are_rejected(doc: dict[str, Any], tmp_path: Path) -> None:
    text = json.dumps(doc, indent=1)
    # The same member twice in one object: json would silently keep the second value.
    text = text.replace('"launch_ms": ', '"launch_ms": 1.0, "launch_ms": ', 1)
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(ProfileTableError, match=f"{path}: key 'launch_ms' appears twice"):
        ProfileTable.load(path)


def test_group_size_keys_that_collide_are_rejected(doc: dict[str, Any]) -> None:
    grid = {"scale": "loglog", "x": [1.0, 2.0], "y": [1.0, 2.0]}
    doc["time"]["p2p_ms"]["by_group_size"] = {"2": grid, "02": grid}
    with pytest.raises(ProfileTableError, match="time.p2p_ms.by_group_size.*without leading zeros.*'02'"):
        ProfileTable.from_dict(doc)


def test_saved_table_has_the_ordinary_file_mode(table: ProfileTable, tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        table.save(tmp_path / "profile.json")
    finally:
        os.umask(previous)
    assert (tmp_path / "profile.json").stat().st_mode & 0o777 == 0o640  # 0666 less the umask, not mkstemp's 0600
