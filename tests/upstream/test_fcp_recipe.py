"""The FCP recipe is upstream's Qwen3-VL 8B recipe with only the FCP keys changed.

That it trains is `test_fcp_training.py`; here, that a user gets FCP by changing two values of upstream's recipe
(`context_parallel_algo` and `sampler_type`) and adding `fcp_*` keys, and that the misconfigured runs stop
at start with an error naming the YAML key.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bed import REPO
from runner import LaunchError

FCP_RECIPE = REPO / "examples" / "qwen3vl" / "qwen3vl_full_sft_8B_fcp.yaml"
UPSTREAM_RECIPE = Path("examples") / "qwen3vl" / "qwen3vl_full_sft_8B.yaml"
FCP_CHANGES = {"gpt_args.context_parallel_algo": ("ulysses_cp_algo", "fcp_cp_algo"),
               "data.dataloader_param.sampler_type": ("BaseRandomBatchSampler", "FCPBatchSampler")}
"""Upstream keys whose value FCP's recipe changes (old, new); every other change must be a new `fcp_*` key."""


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
    assert changed == FCP_CHANGES


def test_fcp_with_upstreams_sampler_stops_at_start_naming_the_yaml_key(upstream_bed) -> None:
    fcp_keys = {"fcp_preset": "cpu-tiny", "fcp_max_degree": 2}
    recipe = upstream_bed.recipe(cp_algo="fcp_cp_algo", train_iters=2, extra_gpt=fcp_keys)
    assert recipe["data"]["dataloader_param"]["sampler_type"] == "BaseRandomBatchSampler"
    with pytest.raises(LaunchError) as failure:
        upstream_bed.run(recipe, 2, name="fcp_wrong_sampler", register_fcp=True)
    log = (upstream_bed.root / "runs" / "fcp_wrong_sampler" / "fcp_wrong_sampler.log").read_text(errors="replace")
    for rank in (0, 1):
        applied = (rf"\[Rank {rank} \| Local Rank {rank}\].*FCP: context_parallel_algo=fcp_cp_algo on 2 ranks, "
                   r"max degree 2, cost source cpu-tiny; patched megatron\.core")
        assert re.search(applied, log), failure.value
    assert "building VLMModel" in log
    assert re.search(r"\[rank[01]\]: .*FCPDataError: context_parallel_algo fcp_cp_algo plans every step from its "
                     r"data: set data\.dataloader_param\.sampler_type: FCPBatchSampler \(got 'BaseRandomBatchSampler'\)",
                     log), failure.value
