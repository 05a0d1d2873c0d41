"""`fcp profile` on one device: one process measures the compute terms, the links come from a preset or from a
table measured with several processes on the real node, and the provenance says which term came from where."""
from __future__ import annotations

from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable
from mindspeed_mm.core.fcp.cost.presets import build_preset_table
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig

ONE_DEVICE = ["--attention-lengths", "8,16,32", "--linear-tokens", "32,96", "--world-size", "1", "--repeats", "2",
              "--sweeps", "1", "--no-progress"]


def test_one_process_takes_the_links_of_a_measured_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The links of "the real node": here a table whose communication terms are recognisable.
    node = build_preset_table("cpu", "tiny", ranks_per_node=4)
    node_path = tmp_path / "node.json"
    node.save(node_path)
    out_path = tmp_path / "one_device.json"
    assert main(["profile", "-o", str(out_path), *ONE_DEVICE, "--comm-from", str(node_path)]) == 0
    assert f"communication  profile table {node_path}" in capsys.readouterr().out

    table = ProfileTable.load(out_path)
    tm = table.time
    assert tm.p2p_intra_ms == node.time.p2p_intra_ms and tm.all_to_all_inter_ms == node.time.all_to_all_inter_ms
    assert table.hardware.intra_node_bytes_per_s == node.hardware.intra_node_bytes_per_s
    assert table.step.fsdp_round_ms == node.step.fsdp_round_ms
    assert table.step.replica_reduction_ms == node.step.replica_reduction_ms
    # The compute terms are this process's own.
    assert table.step.optimizer_ms > 0 and table.step.optimizer_ms != node.step.optimizer_ms
    assert tm.attention_causal_ms.x == (8.0, 16.0, 32.0) and tm.attention_call_ms > 0
    # Ulysses ranks' attention is compute alone: timed up to the node's ranks (tiny: 4 heads, 2 KV heads).
    assert set(tm.attention_ulysses_ms) == {2, 4}
    sources = table.provenance["term_sources"]
    assert sources["communication"] == f"profile table {node_path}"
    assert sources["compute"] == "measured by 1 process(es) on cpu"
    assert "FSDP round and gradient reduction from profile table" in sources["step"]
    # The planner reads it as any table.
    cost = CostModel(table, max_tokens_per_rank=64)
    assert cost.group_time_ms(cost.workload([40, 20]), 2, "ring") > 0


def test_one_process_takes_the_links_of_a_hardware_preset(tmp_path: Path) -> None:
    out_path = tmp_path / "one_device.json"
    assert main(["profile", "-o", str(out_path), *ONE_DEVICE, "--comm-from", "cpu", "--no-vision"]) == 0
    table = ProfileTable.load(out_path)
    preset = build_preset_table("cpu", "tiny", recompute="none")
    assert table.time.all_to_all_intra_ms == preset.time.all_to_all_intra_ms
    assert table.provenance["term_sources"]["communication"] == "hardware preset cpu"
    assert table.model.vision is None


@pytest.mark.parametrize("options, message", [
    ({"world_size": 1}, "--world-size 1 measures no communication: name where its terms come from with --comm-from"),
    ({"world_size": 2, "comm_from": "cpu"}, "--comm-from is for a one-process profile"),
    ({"world_size": 1, "comm_from": "no-such-preset"}, "--comm-from 'no-such-preset': neither a hardware preset"),
])
def test_one_process_options_are_checked(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProfileConfig(**options)


def test_validation_needs_several_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "-o", str(tmp_path / "t.json"), *ONE_DEVICE, "--comm-from", "cpu", "--validate"]) != 0
    assert "--validate runs groups of several ranks: it needs --world-size >= 2" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
