"""What the plans know of Qwen3-VL's vision tower before any image or video is loaded: each training sample's
encoder patches.

MindSpeed-MM's Qwen3-VL preprocessing expands every image and video into its visual tokens in `input_ids`: one
`image_token_id` / `video_token_id` per merged token, i.e. per `spatial_merge_size`^2 patches of the encoder.
Counting them in the preprocessed `input_ids` column gives the patches of every sample; the ids and the merge
size come from the model's Hugging Face `config.json` at `preprocess_parameters.model_name_or_path`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mindspeed_mm.core.fcp.runtime.step_plans import FCPDataError

MODEL_PATH_KEY = "data.dataset_param.preprocess_parameters.model_name_or_path"


def _get(section: Any, key: str) -> Any:
    return section.get(key) if isinstance(section, dict) else getattr(section, key, None)


def model_config(dataset_param: Any) -> tuple[dict[str, Any], Path]:
    """The Hugging Face `config.json` of the model the data were preprocessed for, and its path."""
    model_path = _get(_get(dataset_param, "preprocess_parameters") or {}, "model_name_or_path")
    if not model_path:
        raise FCPDataError(f"FCP reads the vision tokens of every sample from the model's config: set {MODEL_PATH_KEY}")
    config_path = Path(model_path) / "config.json"
    try:
        return json.loads(config_path.read_text(encoding="utf-8")), config_path
    except (OSError, json.JSONDecodeError) as exc:
        raise FCPDataError(f"{MODEL_PATH_KEY}: cannot read the model's {config_path}: {exc}") from exc


def vision_token_ids(dataset_param: Any) -> tuple[int, int, int]:
    """(image token id, video token id, spatial merge size) of the model the data were preprocessed for."""
    config, config_path = model_config(dataset_param)
    vision = config.get("vision_config") or {}
    values = {"image_token_id": config.get("image_token_id"), "video_token_id": config.get("video_token_id"),
              "vision_config.spatial_merge_size": vision.get("spatial_merge_size")}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FCPDataError(f"{config_path}: {key} must be a positive integer, got {value!r}")
    return values["image_token_id"], values["video_token_id"], values["vision_config.spatial_merge_size"]


def count_vision_patches(input_ids: Any, image_id: int, video_id: int, merge: int) -> list[int]:
    """Patches of every row of an Arrow list column of token ids: its image and video tokens x merge^2, counted
    one chunk at a time (a chunk's tokens at once, never the whole column's)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = input_ids.chunks if isinstance(input_ids, pa.ChunkedArray) else [input_ids]
    counts: list[np.ndarray] = []
    for chunk in chunks:
        values = pc.list_flatten(chunk).to_numpy(zero_copy_only=False)
        parents = pc.list_parent_indices(chunk).to_numpy(zero_copy_only=False)
        visual = (values == image_id) | (values == video_id)
        counts.append(np.bincount(parents[visual], minlength=len(chunk)))
    if not counts:
        return []
    return [int(n) * merge * merge for n in np.concatenate(counts)]
