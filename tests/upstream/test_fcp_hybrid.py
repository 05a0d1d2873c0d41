"""FCP's hybrid Ulysses x ring groups train upstream's Qwen3-VL through the unmodified `pretrain_transformers.py`
as one device would.

Four gloo processes taken as two nodes of two (`fcp_ranks_per_node: 2`), planned from a cost table whose links
between nodes are 8 times slower than inside a node (an Atlas A3 die: 196 GB/s inside, 25 GB/s between nodes):
the planner gives its groups of 4 a 2 x 2 split (Ulysses over a node's two ranks, ring across the two nodes),
whose blocks run through FCP's `npu_fusion` adapter on the bed's `npu_fusion_attention`. The tiny Qwen3-VL
(loaded fp32 weights, FSDP2) trains 4 steps; every step's loss must agree with one process without FCP within
1e-5 and its grad norm within 1e-4 (relative), as `test_fcp_training.py` holds ring and Ulysses groups to.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from mindspeed_mm.core.fcp.cost.presets import preset_table

STEPS = 4
GLOBAL_BATCH = 8
SLOWER_BETWEEN_NODES = 8.0
FCP_KEYS = {"fcp_preset": None, "fcp_max_tokens_per_rank": 50, "fcp_ranks_per_node": 2, "fcp_log_plan": True,
            "fcp_attention_kernel": "npu_fusion"}
NPU_ADAPTER = "mindspeed_mm.core.fcp.parallel.kernels.npu_fusion"
TRAINING = {"lr": 1e-3, "min_lr": 1e-3, "lr_warmup_fraction": None, "lr_warmup_iters": 0}
ALGOS_LINE = re.compile(r"\[Rank 0 \|.*FCP plan of step (\d+): .*, algos (\[\[.*\]\])")


@pytest.fixture(scope="module")
def runs(upstream_bed, tmp_path_factory):
    table = preset_table("cpu-tiny")
    tm = table.time

    def slower(grid):
        return dataclasses.replace(grid, y=tuple(SLOWER_BETWEEN_NODES * y for y in grid.y))

    path = tmp_path_factory.mktemp("hybrid_table") / "cpu_tiny_two_nodes.json"
    dataclasses.replace(table, time=dataclasses.replace(tm, p2p_inter_ms=slower(tm.p2p_inter_ms),
                                                        all_to_all_inter_ms=slower(tm.all_to_all_inter_ms))).save(path)

    def recipe(fcp: bool) -> dict:
        extra = dict(TRAINING, **(dict(FCP_KEYS, fcp_profile_table=str(path)) if fcp else {}))
        built = upstream_bed.recipe(cp_algo="fcp_cp_algo" if fcp else "ulysses_cp_algo", train_iters=STEPS,
                                    global_batch_size=GLOBAL_BATCH, extra_gpt=extra)
        if fcp:
            built["data"]["dataloader_param"]["sampler_type"] = "FCPBatchSampler"
        return built

    done = upstream_bed.run_many([dict(recipe=recipe(False), nproc=1, name="hybrid_single"),
                                  dict(recipe=recipe(True), nproc=4, name="hybrid_fcp", register_fcp=True)])
    done = {"single": done["hybrid_single"], "fcp": done["hybrid_fcp"]}
    for name, log in done.items():
        print(f"[upstream FCP hybrid] {name}: wall={log.wall_s:.1f}s losses={log.losses} grad_norms={log.grad_norms}")
    return done


def test_hybrid_groups_on_4_processes_train_like_one_process(upstream_bed, runs) -> None:
    fcp, single = runs["fcp"], runs["single"]
    algos = {int(m.group(1)): json.loads(m.group(2)) for m in ALGOS_LINE.finditer(fcp.text)}
    print(f"[upstream FCP hybrid] algos per step: {algos}")
    assert sorted(algos) == list(range(1, STEPS + 1))
    assert any("hybrid:2x2" in groups for rounds in algos.values() for groups in rounds), algos
    assert len(fcp.losses) == len(single.losses) == STEPS
    for step, (got, want) in enumerate(zip(fcp.losses, single.losses), start=1):
        assert math.isclose(got, want, rel_tol=1e-5), f"loss of step {step}: FCP {got}, 1 process {want}"
    for step, (got, want) in enumerate(zip(fcp.grad_norms, single.grad_norms), start=1):
        assert math.isclose(got, want, rel_tol=1e-4), f"grad norm of step {step}: FCP {got}, 1 process {want}"
    calls = upstream_bed.op_calls("hybrid_fcp")
    assert len(calls) == 4
    for rank_calls in calls:
        assert rank_calls.get(f"npu_fusion_attention:caller:{NPU_ADAPTER}", 0) > 0, rank_calls
        assert rank_calls.get(f"npu_fusion_attention_grad:caller:{NPU_ADAPTER}", 0) > 0, rank_calls
