"""`fcp profile --recipe`: the vision window of the largest frame a MindSpeed-MM recipe's data keeps."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mindspeed_mm.core.fcp.cli import main
from mindspeed_mm.core.fcp.cost.model_config import recipe_vision_window


def _recipe(tmp_path: Path, *, videos: bool = True, pixels: dict | None = None) -> Path:
    preprocess = {"image_max_pixels": 262144, "video_max_pixels": 16384} if pixels is None else pixels
    recipe = {"model": {"model_id": "qwen3_vl", "init_from_hf_path": "hf"},
              "data": {"dataset_param": {"attr": {"images": "images", "videos": "videos" if videos else None},
                                         "preprocess_parameters": preprocess}}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_the_window_is_the_largest_frame_the_recipe_keeps(tmp_path: Path) -> None:
    # A 128 x 128 video frame in 16-pixel patches; a recipe that reads no videos: its largest image.
    assert recipe_vision_window(_recipe(tmp_path), patch_size=16, spatial_merge=2) == 16384 // 256
    assert recipe_vision_window(_recipe(tmp_path, videos=False), patch_size=16, spatial_merge=2) == 262144 // 256
    # At least one merged token; no frame size: the caller's default.
    assert recipe_vision_window(_recipe(tmp_path, pixels={"video_max_pixels": 16}), 16, 2) == 4
    assert recipe_vision_window(_recipe(tmp_path, pixels={}), 16, 2) is None


def test_recipe_and_model_are_exclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "-o", str(tmp_path / "t.json"), "--model", "tiny", "--recipe", str(_recipe(tmp_path))]) != 0
    assert "not allowed with argument" in capsys.readouterr().err
