"""FCP trains upstream's Qwen3-VL through the unmodified `pretrain_transformers.py` exactly as one device would.

The tiny Qwen3-VL (loaded fp32 weights) trains 6 steps on its image and video samples, global batch 8:
with `context_parallel_algo: fcp_cp_algo` and `sampler_type: FCPBatchSampler` on 4 gloo processes, and
without FCP on 1 process, under FSDP2 and under Megatron DDP. `fcp_max_tokens_per_rank: 70` makes the
planner put the longer samples (68-174 tokens) into groups of 2, 3 and 4 ranks, all ring groups whose blocks run
through FCP's `npu_fusion` adapter on the bed's `npu_fusion_attention`. Every step's loss must
agree within 1e-5 and its grad norm within 1e-4 (relative), so the packed samples, the zigzag shards, the
mRoPE ids, the vision features, ring / Ulysses attention over the round's group, the loss weighting and the
gradient reduction all reproduce single-device training.

A third FCP run (FSDP2) has hybrid groups: its 4 processes are taken as two nodes of two (`fcp_ranks_per_node:
2`) and planned from a cost table whose links between nodes are 8 times slower than inside a node (an Atlas A3
die: 196 GB/s inside, 25 GB/s between nodes), so the planner runs groups of 4 as 2 x 2 (Ulysses over a node's
two ranks, ring across the two nodes), with `fcp_max_tokens_per_rank: 50` so that most groups have 4 ranks;
held to the same bounds against the same single-process run.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from mindspeed_mm.core.fcp.cost.model_config import read_model_config
from mindspeed_mm.core.fcp.cost.presets import ModelPreset, build_preset_table
from runner import logged_argument

STEPS = 6
GLOBAL_BATCH = 8
FCP_KEYS = {"fcp_preset": "cpu-tiny", "fcp_max_tokens_per_rank": 70, "fcp_log_plan": True,
            "fcp_attention_algo": "ring", "fcp_attention_kernel": "npu_fusion"}
NPU_ADAPTER = "mindspeed_mm.core.fcp.parallel.kernels.npu_fusion"
# A constant, non-zero learning rate, so that every step's weights (and so its loss) depend on the previous
# steps' gradients (upstream's recipe warms up from 0).
TRAINING = {"lr": 1e-3, "min_lr": 1e-3, "lr_warmup_fraction": None, "lr_warmup_iters": 0}
PLAN_LINE = re.compile(r"\[Rank 0 \|.*FCP plan of step (\d+): (\d+) rounds, degrees (\[\[.*?\]\])")
ALGOS_LINE = re.compile(r"\[Rank 0 \|.*FCP plan of step (\d+): .*, algos (\[\[.*\]\])")
SLOWER_BETWEEN_NODES = 8.0
HYBRID_KEYS = {"fcp_preset": None, "fcp_max_tokens_per_rank": 50, "fcp_ranks_per_node": 2, "fcp_attention_algo": None}


def two_node_table(path, config_json) -> str:
    """The cpu preset's table of the bed's model (`config_json`) with links between nodes `SLOWER_BETWEEN_NODES`
    times slower, saved at `path` (a profile table must be of the model the run trains)."""
    config = read_model_config(config_json)
    table = build_preset_table("cpu", "tiny", model_preset=ModelPreset(config.decoder, config.encoder, "none",
                                                                       "the bed's config.json"))
    tm = table.time

    def slower(grid):
        return dataclasses.replace(grid, y=tuple(SLOWER_BETWEEN_NODES * y for y in grid.y))

    dataclasses.replace(table, time=dataclasses.replace(tm, p2p_inter_ms=slower(tm.p2p_inter_ms),
                                                        all_to_all_inter_ms=slower(tm.all_to_all_inter_ms))).save(path)
    return str(path)


@pytest.fixture(scope="module")
def runs(upstream_bed, tmp_path_factory):
    def recipe(fcp: bool, fsdp2: bool, hybrid: bool = False) -> dict:
        extra = dict(TRAINING, **(FCP_KEYS if fcp else {}))
        if hybrid:
            extra.update(HYBRID_KEYS, fcp_profile_table=two_node_table(tmp_path_factory.mktemp("hybrid") / "table.json",
                                                                      upstream_bed.hf_dir / "config.json"))
        built = upstream_bed.recipe(cp_algo="fcp_cp_algo" if fcp else "ulysses_cp_algo", fsdp2=fsdp2,
                                    train_iters=STEPS, global_batch_size=GLOBAL_BATCH, extra_gpt=extra)
        if fcp:
            built["data"]["dataloader_param"]["sampler_type"] = "FCPBatchSampler"
        return built

    done = upstream_bed.run_many([
        dict(recipe=recipe(False, True), nproc=1, name="single_fsdp2"),
        dict(recipe=recipe(False, False), nproc=1, name="single_ddp"),
    ])
    for name, fsdp2 in (("fcp_fsdp2", True), ("fcp_ddp", False)):
        done[name] = upstream_bed.run(recipe(True, fsdp2), 4, name=name, register_fcp=True)
    done["fcp_hybrid"] = upstream_bed.run(recipe(True, True, hybrid=True), 4, name="fcp_hybrid", register_fcp=True)
    for name, log in done.items():
        print(f"[upstream FCP] {name}: wall={log.wall_s:.1f}s losses={log.losses} grad_norms={log.grad_norms} "
              f"step_ms={log.step_times_ms}")
    return done


def assert_trains_like_one_process(fcp, single, steps: int, label: str) -> None:
    """The FCP run's losses within 1e-5 and grad norms within 1e-4 of the one-process run's, every step."""
    assert len(fcp.losses) == len(single.losses) == steps
    for step, (got, want) in enumerate(zip(fcp.losses, single.losses), start=1):
        assert math.isclose(got, want, rel_tol=1e-5), f"{label}: loss of step {step}: FCP {got}, 1 process {want}"
    for step, (got, want) in enumerate(zip(fcp.grad_norms, single.grad_norms), start=1):
        assert math.isclose(got, want, rel_tol=1e-4), f"{label}: grad norm of step {step}: FCP {got}, 1 process {want}"


def degrees_used(text: str) -> set[int]:
    """Every group degree the run's logged plans used."""
    return {d for rounds in planned_degrees(text).values() for groups in rounds for d in groups}


def planned_degrees(text: str) -> dict[int, list[list[int]]]:
    return {int(m.group(1)): json.loads(m.group(3)) for m in PLAN_LINE.finditer(text)}


@pytest.mark.parametrize("parallel", ["fsdp2", "ddp", "hybrid"])
def test_fcp_on_4_processes_trains_like_one_process(runs, parallel) -> None:
    fcp, single = runs[f"fcp_{parallel}"], runs["single_ddp" if parallel == "ddp" else "single_fsdp2"]
    assert logged_argument(fcp.text, "context_parallel_algo") == "fcp_cp_algo"
    assert logged_argument(fcp.text, "world_size") == "4"
    assert_trains_like_one_process(fcp, single, STEPS, parallel)


def test_the_log_shows_each_rounds_groups_with_multi_rank_and_odd_degrees(runs) -> None:
    degrees = planned_degrees(runs["fcp_fsdp2"].text)
    assert sorted(degrees) == list(range(1, STEPS + 1))
    used = {degree for rounds in degrees.values() for groups in rounds for degree in groups}
    assert all(sum(groups) == 4 for rounds in degrees.values() for groups in rounds)
    assert 2 in used and 3 in used, used
    assert "FCPBatchSampler plans 16 samples" in runs["fcp_fsdp2"].text


FRAMEWORK_LINE = re.compile(r"FCP: rank (\d+) holds (\d+) MindSpeed / Megatron communicators; the memory limit "
                            r"sets aside buffers for (\d+)")


@pytest.mark.parametrize("parallel", ["fsdp2", "ddp"])
def test_the_memory_model_counts_the_communicators_the_upstream_path_creates(runs, parallel) -> None:
    """The process groups of more than one rank each rank holds when FCP starts (MindSpeed's and Megatron's, less
    Megatron's gloo copies) are those `framework_communicators` counts for the memory limit."""
    found = {int(rank): (int(held), int(assumed)) for rank, held, assumed in
             FRAMEWORK_LINE.findall(runs[f"fcp_{parallel}"].text)}
    assert sorted(found) == [0, 1, 2, 3]
    assert all(held == assumed for held, assumed in found.values()), found


def test_the_hybrid_run_planned_2_x_2_groups(runs) -> None:
    algos = {int(m.group(1)): json.loads(m.group(2)) for m in ALGOS_LINE.finditer(runs["fcp_hybrid"].text)}
    assert sorted(algos) == list(range(1, STEPS + 1))
    assert any("hybrid:2x2" in groups for rounds in algos.values() for groups in rounds), algos
    assert logged_argument(runs["fcp_hybrid"].text, "fcp_ranks_per_node") == "2"


@pytest.mark.parametrize("parallel", ["fsdp2", "ddp", "hybrid"])
def test_fcp_ring_blocks_ran_on_the_npu_kernel_through_fcps_adapter(upstream_bed, runs, parallel) -> None:
    text = runs[f"fcp_{parallel}"].text
    assert logged_argument(text, "fcp_attention_algo") == ("auto" if parallel == "hybrid" else "ring")
    assert logged_argument(text, "fcp_attention_kernel") == "npu_fusion"
    calls = upstream_bed.op_calls(f"fcp_{parallel}")
    assert len(calls) == 4
    for rank_calls in calls:
        assert rank_calls.get(f"npu_fusion_attention:caller:{NPU_ADAPTER}", 0) > 0, rank_calls
        assert rank_calls.get(f"npu_fusion_attention_grad:caller:{NPU_ADAPTER}", 0) > 0, rank_calls
