"""The FCP recipe is upstream's Qwen3-VL 8B recipe with only the FCP keys and the long-video keys changed.

That it trains is `test_fcp_training.py`; here, that a user gets FCP by changing two values of upstream's recipe
(`context_parallel_algo` and `sampler_type`) and adding `fcp_*` keys. (Another sampler under `fcp_cp_algo` is
refused naming the YAML key: `tests/ut/feature/test_feature_data_loader.py`; the training test shows the wrapper is what
upstream's data loader builder runs.)
"""
from __future__ import annotations

from pathlib import Path

import yaml

from bed import REPO

FCP_RECIPE = REPO / "examples" / "qwen3vl" / "qwen3vl_full_sft_8B_fcp.yaml"
UPSTREAM_RECIPE = Path("examples") / "qwen3vl" / "qwen3vl_full_sft_8B.yaml"
FCP_CHANGES = {"gpt_args.context_parallel_algo": ("ulysses_cp_algo", "fcp_cp_algo"),
               "data.dataloader_param.sampler_type": ("BaseRandomBatchSampler", "FCPBatchSampler")}
"""Upstream keys whose value FCP's recipe changes (old, new) to run FCP."""
LONG_VIDEO_CHANGES = {"gpt_args.seq_length": (1024, 131072),
                      "data.dataset_param.attr.videos": (None, "videos"),
                      "data.dataset_param.preprocess_parameters.video_max_pixels": (16384, 768 * 32 * 32),
                      "data.dataset_param.preprocess_parameters.video_min_pixels": (0, 128 * 32 * 32),
                      "data.dataset_param.preprocess_parameters.video_maxlen": (64, 768)}
"""Upstream keys FCP's recipe changes for long videos, the data FCP is for: upstream's recipe truncates every
sample to 1024 tokens and reads images only, so it never forms a CP group. Values from the Qwen3-VL video rule
(patch 16, merge 2: 32 x 32 pixels per token; 128 to 768 tokens per 2 frames, up to 768 frames). Every other
change must be a new `fcp_*` key."""


def flatten(node: object, prefix: str = "") -> dict[str, object]:
    if not isinstance(node, dict):
        return {prefix: node}
    flat: dict[str, object] = {}
    for key, value in node.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def test_fcp_recipe_differs_from_upstream_only_in_the_fcp_keys(upstream_bed) -> None:
    upstream = flatten(yaml.safe_load((upstream_bed.sources.mindspeed_mm / UPSTREAM_RECIPE).read_text()))
    ours = flatten(yaml.safe_load(FCP_RECIPE.read_text()))
    removed = sorted(set(upstream) - set(ours))
    added = sorted(set(ours) - set(upstream))
    changed = {key: (upstream[key], ours[key]) for key in set(upstream) & set(ours) if upstream[key] != ours[key]}
    assert removed == []
    assert added and all(key.startswith("gpt_args.fcp_") for key in added), added
    assert changed == {**FCP_CHANGES, **LONG_VIDEO_CHANGES}
