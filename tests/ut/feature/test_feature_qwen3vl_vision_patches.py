"""Each sample's vision patches, read before loading: its image and video tokens in the preprocessed `input_ids`
times the encoder's spatial merge area, with the ids and the merge size of the model's config."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from mindspeed_mm.core.fcp.runtime.step_plans import FCPDataError
from mindspeed_mm.features_manager.fcp.qwen3vl.vision_tokens import count_vision_patches, vision_token_ids

IMAGE, VIDEO = 7, 8


def test_visual_tokens_times_the_merge_area_per_sample_chunk_by_chunk() -> None:
    column = pa.chunked_array([
        pa.array([[1, IMAGE, IMAGE, 2], [3, 4], [VIDEO] * 5 + [IMAGE]], type=pa.list_(pa.int64())),
        pa.array([[], [IMAGE, 9, VIDEO]], type=pa.list_(pa.int64())),
    ])
    assert count_vision_patches(column, IMAGE, VIDEO, 2) == [8, 0, 24, 0, 8]
    assert count_vision_patches(pa.chunked_array([], type=pa.list_(pa.int64())), IMAGE, VIDEO, 2) == []


def _model(tmp_path: Path, config: dict) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return {"preprocess_parameters": {"model_name_or_path": str(tmp_path)}}


def test_the_ids_and_merge_size_come_from_the_models_config(tmp_path: Path) -> None:
    param = _model(tmp_path, {"image_token_id": IMAGE, "video_token_id": VIDEO, "vision_config": {"spatial_merge_size": 2}})
    assert vision_token_ids(param) == (IMAGE, VIDEO, 2)


@pytest.mark.parametrize("param, message", [
    ({}, "set data.dataset_param.preprocess_parameters.model_name_or_path"),
    ({"preprocess_parameters": {"model_name_or_path": "/no/such/model"}}, "cannot read the model's /no/such/model/config.json"),
])
def test_a_missing_model_is_named(param: dict, message: str) -> None:
    with pytest.raises(FCPDataError, match=message):
        vision_token_ids(param)


def test_a_missing_key_is_named_with_the_file(tmp_path: Path) -> None:
    param = _model(tmp_path, {"image_token_id": IMAGE, "vision_config": {"spatial_merge_size": 2}})
    with pytest.raises(FCPDataError, match=r"config.json: video_token_id must be a positive integer, got None"):
        vision_token_ids(param)
