"""FCP trains upstream's Qwen3-VL-MoE (`model_id: qwen3_vl_moe`) through the unmodified `pretrain_transformers.py`
exactly as one process without FCP does.

The tiny MoE Qwen3-VL (every decoder layer 4 experts, top 2; loaded fp32 weights) trains 4 steps of global batch 8
from upstream's 30B-A3B recipe (`qwen3vl_full_sft_30B.yaml`, whose model differs from the 8B recipe's only in
`model_id` and the router's balancing-loss coefficient 0.0) under FSDP2, with `fcp_max_tokens_per_rank: 70` so
that the plans hold groups of 2, 3 and 4 ranks:

- `trainable`: a trainable vision tower, upstream's plain experts (`use_npu_fused_moe: false`, the 30B recipe's);
- `frozen_ep2`: upstream's frozen tower, the NPU-fused experts (`use_npu_fused_moe: true`, the 235B recipe's) and
  expert parallelism 2 (`fsdp2_config.expert_parallel_size`): each expert's weights live on half of the ranks and
  every MoE layer sends each token to its experts' ranks by upstream's all-to-alls (`fused_ep_forward`), across
  FCP's groups; the run without FCP is the same model on one process (no expert parallelism, fused experts).

Every step's loss must agree within 1e-5 and its grad norm within 1e-4 (relative), as in `test_fcp_training.py`.
"""
from __future__ import annotations

import pytest

from conftest import bed_or_skip
from harness import UpstreamBed
from test_fcp_training import assert_trains_like_one_process, degrees_used

STEPS = 4
GLOBAL_BATCH = 8
FCP_KEYS = {"fcp_preset": "cpu-tiny-moe", "fcp_max_tokens_per_rank": 70, "fcp_log_plan": True}
TRAINING = {"lr": 1e-3, "min_lr": 1e-3, "lr_warmup_fraction": None, "lr_warmup_iters": 0}
CASES = {"trainable": dict(trainable_vision=True, fused=False, expert_parallel=1),
         "frozen_ep2": dict(trainable_vision=False, fused=True, expert_parallel=2)}


@pytest.fixture(scope="module")
def moe_bed(tmp_path_factory) -> UpstreamBed:
    return bed_or_skip(tmp_path_factory.mktemp("upstream_bed_moe"), moe=True)


@pytest.fixture(scope="module")
def runs(moe_bed):
    def recipe(fcp: bool, trainable_vision: bool, fused: bool, expert_parallel: int) -> dict:
        overrides = {"expert_parallel_size": expert_parallel} if fcp and expert_parallel > 1 else None
        built = moe_bed.recipe(cp_algo="fcp_cp_algo" if fcp else "ulysses_cp_algo", train_iters=STEPS,
                               global_batch_size=GLOBAL_BATCH, extra_gpt=dict(TRAINING, **(FCP_KEYS if fcp else {})),
                               fsdp2_overrides=overrides)
        model = built["model"]
        assert model["model_id"] == "qwen3_vl_moe" and model["loss_cfg"]["router_aux_loss_coef"] == 0.0
        model["text_decoder"]["use_npu_fused_moe"] = fused
        encoder = model["image_encoder"]
        encoder["vision_encoder"]["freeze"] = encoder["vision_projector"]["freeze"] = not trainable_vision
        if fcp:
            built["data"]["dataloader_param"]["sampler_type"] = "FCPBatchSampler"
        return built

    done = moe_bed.run_many([dict(recipe=recipe(False, **case), nproc=1, name=f"single_{name}")
                             for name, case in CASES.items()])
    for name, case in CASES.items():
        done[f"fcp_{name}"] = moe_bed.run(recipe(True, **case), 4, name=f"fcp_{name}", register_fcp=True)
    for name, log in done.items():
        print(f"[upstream FCP MoE] {name}: wall={log.wall_s:.1f}s losses={log.losses} grad_norms={log.grad_norms}")
    return done


@pytest.mark.parametrize("case", sorted(CASES))
def test_fcp_on_4_processes_trains_the_moe_model_like_one_process(runs, case) -> None:
    fcp, single = runs[f"fcp_{case}"], runs[f"single_{case}"]
    assert_trains_like_one_process(fcp, single, STEPS, case)
    degrees = degrees_used(fcp.text)
    assert {2, 3} <= degrees, degrees


def test_expert_parallelism_ran_the_fused_experts_through_the_cpu_operators(moe_bed, runs) -> None:
    # Upstream's expert-parallel forward (`fused_ep_forward`) permutes and unpermutes twice per MoE layer call (once
    # for its ranks, once for its local experts), its fused forward without expert parallelism once.
    for name, per_call in (("fcp_frozen_ep2", 2), ("single_frozen_ep2", 1)):
        for rank_calls in moe_bed.op_calls(name):
            layers = rank_calls.get("npu_swiglu", 0)
            assert layers > 0 and rank_calls.get("npu_grouped_matmul", 0) > 0, (name, rank_calls)
            assert rank_calls["npu_moe_token_permute"] == rank_calls["npu_moe_token_unpermute"] == per_call * layers, \
                (name, rank_calls)
