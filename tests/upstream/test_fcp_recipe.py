"""The FCP recipe is upstream's Qwen3-VL 8B recipe with only the FCP keys changed, and upstream accepts it.

Accepted means: MindSpeed-MM's YAML reader, MindSpeed's first (string-valued) parse, Megatron's parse and
validation with FCP's checks, FCP's patches, the model and the data loader are all built by the unmodified
`pretrain_transformers.py` (plus the one registration line). The run then stops at its first step with FCP's
own error that no plan source was registered: feeding plans from MindSpeed-MM's data loader is the next piece
of work, and this test is where it will start to train.
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
FCP_CHANGES = {"context_parallel_algo": ("ulysses_cp_algo", "fcp_cp_algo")}
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
    assert changed == {f"gpt_args.{key}": values for key, values in FCP_CHANGES.items()}


def test_upstream_accepts_the_fcp_recipe_up_to_the_first_step(upstream_bed) -> None:
    fcp_keys = {"fcp_preset": "cpu-tiny", "fcp_max_degree": 2}
    recipe = upstream_bed.recipe(cp_algo="fcp_cp_algo", train_iters=2, extra_gpt=fcp_keys)
    with pytest.raises(LaunchError) as failure:
        upstream_bed.run(recipe, 2, name="fcp_recipe", register_fcp=True)
    log = (upstream_bed.root / "runs" / "fcp_recipe" / "fcp_recipe.log").read_text(errors="replace")
    for rank in (0, 1):
        applied = (rf"\[Rank {rank} \| Local Rank {rank}\].*FCP: context_parallel_algo=fcp_cp_algo on 2 ranks, "
                   r"max degree 2, cost source cpu-tiny; patched megatron\.core")
        assert re.search(applied, log), failure.value
    assert "building VLMModel" in log
    assert re.search(r"\[rank[01]\]: .*FCPRuntimeError: FCP has no plan source", log), failure.value
