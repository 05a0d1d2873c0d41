"""`fcp profile --layers hf`: the layer and vision terms timed on Hugging Face's Qwen3-VL (which MindSpeed-MM's
Qwen3-VL forks), built from the model shape; on this CPU with the tiny shape."""
from __future__ import annotations

from pathlib import Path

import pytest

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.cost import CostModel, ProfileTable
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.profiler.hf_qwen3vl import rope_sections, window_grid
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig, encoder_shape
from mindspeed_mm.core.fcp.profiler.table_builder import real_layer_terms


def test_the_real_layers_terms_come_from_the_two_and_one_layer_models() -> None:
    config = ProfileConfig(world_size=1, comm_from="cpu", layers="hf", linear_tokens=(64, 256, 1024),
                           attention_lengths=(16, 32, 64))
    tokens = config.linear_tokens
    hf_text = {(1, x): 10.0 + 0.02 * x for x in tokens}
    hf_text.update({(2, x): hf_text[(1, x)] + 3.0 + 0.01 * x for x in tokens})   # one layer: 3 ms + 10 us / token
    causal = Grid((16.0, 1024.0), (0.1, 0.9), "linear")
    lean = {(layers, x): 1.0 + layers * 0.5 + 0.001 * x for layers in (1, 2) for x in tokens}   # outside: 1 ms
    enc = config.encoder
    hf_vision = {(blocks, g): 4.0 + blocks * 1.5 + 0.002 * blocks * g * enc.attention_window
                 for blocks in (1, 2) for g in config.vision_frame_groups}
    terms = real_layer_terms(config, hf_text, hf_vision, causal, 0.5, lean)
    assert terms.provenance["hf_layer_fixed_ms"] == pytest.approx(3.0, rel=1e-6)
    # Above the layer's fixed cost, less the attention core charged apart (max of the floor and the grid).
    expected = [0.01 * x - max(0.5, float(causal(x))) for x in tokens]
    assert list(terms.linear_ms.y) == pytest.approx([max(e, 0.0) for e in expected], abs=1e-9)
    assert terms.launch_ms == pytest.approx(1.0 + config.model.layers * 3.0, rel=1e-6)
    # A call of `depth` blocks: the 1-block model plus depth - 1 extra blocks.
    g = config.vision_frame_groups[-1]
    patches = g * enc.attention_window
    assert float(terms.vision_ms(patches)) == pytest.approx(hf_vision[(1, g)] + (enc.depth - 1) * (1.5 + 0.002 * patches))


def test_shapes_of_the_built_models() -> None:
    assert rope_sections(128) == [24, 20, 20] and sum(rope_sections(16)) == 8
    h, w = window_grid(encoder_shape("qwen3vl-8b"))
    assert (h, w) == (48, 60)   # the 2,880-patch window the H200 measurements used (part HV, grid 48 x 60)


def test_profile_times_hugging_face_qwen3vl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hf.json"
    argv = ["profile", "-o", str(path), "--layers", "hf", "--world-size", "1", "--comm-from", "cpu",
            "--attention-lengths", "8,16,32", "--linear-tokens", "32,96,256", "--repeats", "2", "--sweeps", "1",
            "--no-progress"]
    assert main(argv) == 0
    assert "layers timed on Hugging Face Qwen3-VL (transformers" in capsys.readouterr().out
    table = ProfileTable.load(path)
    prov = table.provenance
    assert set(prov["hf_layer_ms_by_tokens"]) == {"32", "96", "256"} and prov["hf_layer_fixed_ms"] >= 0
    assert set(prov["hf_vision_call_ms_by_frame_groups"]) == {"1", "2", "4", "8"}
    assert table.time.linear_ms is not None and table.time.linear_ms.x == (32.0, 96.0, 256.0)
    assert table.time.vision_ms is not None and "composition" not in prov
    cost = CostModel(table, max_tokens_per_rank=512)
    assert cost.group_time_ms(cost.workload([100, 40], [120, 0]), 2, "ulysses") > 0


def test_validation_of_a_hugging_face_table_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", "-o", str(tmp_path / "t.json"), "--layers", "hf", "--world-size", "2", "--validate",
            "--no-progress"]
    assert main(argv) != 0
    assert "--validate runs its groups on the profiler's lean decoder" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
