"""`fcp profile --recipe`: the shape of the Qwen3-VL a MindSpeed-MM recipe trains, read from its model folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.profiler.recipe_model import read_recipe_model

# The test bed's tiny Qwen3-VL (tests/upstream/tiny_qwen3vl.py), as transformers writes its config.json.
CONFIG = {
    "model_type": "qwen3_vl",
    "text_config": {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16},
    "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16,
                      "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
                      "deepstack_visual_indexes": [0]},
}


def _recipe(tmp_path: Path, *, videos: bool = True, config: dict | None = None, folder: str = "hf") -> Path:
    (tmp_path / folder).mkdir(exist_ok=True)
    (tmp_path / folder / "config.json").write_text(json.dumps(config or CONFIG))
    recipe = {"model": {"model_id": "qwen3_vl", "init_from_hf_path": folder,
                        "text_decoder": {"num_layers": 36, "hidden_size": 4096}},   # Megatron's checks only
              "data": {"dataset_param": {"attr": {"images": "images", "videos": "videos" if videos else None},
                                         "preprocess_parameters": {"image_max_pixels": 262144,
                                                                   "video_max_pixels": 16384}}}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_the_shape_comes_from_the_model_folder_and_the_window_from_the_largest_frame(tmp_path: Path) -> None:
    model = read_recipe_model(_recipe(tmp_path))
    d, e = model.decoder, model.encoder
    assert (d.layers, d.hidden, d.heads, d.kv_heads, d.head_dim, d.ffn, d.vocab) == (2, 64, 4, 2, 16, 128, 320)
    assert d.name == "hf" and d.vision is None and model.config_path == tmp_path / "hf" / "config.json"
    assert (e.depth, e.hidden, e.heads, e.mlp, e.patch_size, e.spatial_merge, e.temporal_patch) == \
        (2, 32, 2, 64, 16, 2, 2)
    assert e.mergers == 2                       # the merger and one DeepStack merger
    assert e.attention_window == 16384 // 256   # a 128 x 128 video frame in 16-pixel patches
    # A recipe that reads no videos: its largest image.
    assert read_recipe_model(_recipe(tmp_path, videos=False)).encoder.attention_window == 262144 // 256


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r["model"].pop("init_from_hf_path"), "no key 'model.init_from_hf_path'"),
    (lambda r: r["model"].update(init_from_hf_path="elsewhere"), "'elsewhere' holds no config.json"),
])
def test_a_recipe_without_its_model_folder_is_refused_naming_the_key(tmp_path: Path, change, message) -> None:
    path = _recipe(tmp_path)
    recipe = yaml.safe_load(path.read_text())
    change(recipe)
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(ValueError, match=message):
        read_recipe_model(path)


def test_a_config_that_is_not_qwen3_vl_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"config.json: not a Qwen3-VL config"):
        read_recipe_model(_recipe(tmp_path, config={"hidden_size": 64}))
    broken = {**CONFIG, "vision_config": {k: v for k, v in CONFIG["vision_config"].items() if k != "depth"}}
    with pytest.raises(ValueError, match=r"needs 'depth'"):
        read_recipe_model(_recipe(tmp_path, config=broken))


def test_recipe_and_model_are_exclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "-o", str(tmp_path / "t.json"), "--model", "tiny", "--recipe", str(_recipe(tmp_path))]) != 0
    assert "not allowed with argument" in capsys.readouterr().err
