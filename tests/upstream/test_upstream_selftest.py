"""Self-test of the bed without FCP: upstream `pretrain_transformers.py` on the tiny Qwen3-VL.

1 process, 2 processes with DP=2, 2 processes with CP=2 `ulysses_cp_algo` (FSDP2), and CP=2 under Megatron DDP,
5 steps each on the same image+video samples with loaded fp32 weights: the per-step losses must agree (the global
batch is the same samples whatever the layout). Plus the user's registration line: with it but without
`fcp_cp_algo`, training is unchanged.
"""
from __future__ import annotations

import math

import pytest

from runner import logged_argument

STEPS = 5
SCENARIOS = {
    # name: (nproc, recipe keywords, register_fcp, the layout Megatron must report: DP, CP, FSDP2)
    "single": (1, dict(), False, ("1", "1", "True")),
    "dp2": (2, dict(), False, ("2", "1", "True")),
    "cp2_ulysses": (2, dict(cp=2, cp_algo="ulysses_cp_algo"), False, ("1", "2", "True")),
    "cp2_ulysses_ddp": (2, dict(cp=2, cp_algo="ulysses_cp_algo", fsdp2=False), False, ("1", "2", "False")),
    "single_fcp_line": (1, dict(), True, ("1", "1", "True")),
}


# The single-process scenarios run side by side (one core each on a 2-core host).
TOGETHER = (("single", "single_fcp_line"),)


@pytest.fixture(scope="session")
def runs(upstream_bed):
    """Launch each scenario once per session, on first use."""
    done = {}

    def launch(name):
        nproc, keywords, register, _ = SCENARIOS[name]
        return dict(recipe=upstream_bed.recipe(train_iters=STEPS, **keywords), nproc=nproc, name=name,
                    register_fcp=register)

    def get(name):
        if name not in done:
            group = next((g for g in TOGETHER if name in g), (name,))
            done.update(upstream_bed.run_many([launch(n) for n in group]))
            for n in group:
                log = done[n]
                print(f"[upstream bed] {n}: nproc={SCENARIOS[n][0]} wall={log.wall_s:.1f}s losses={log.losses} "
                      f"grad_norms={log.grad_norms} step_ms={log.step_times_ms}")
        return done[name]

    return get


def assert_layout(name, log):
    layout = tuple(logged_argument(log.text, key) for key in
                   ("data_parallel_size", "context_parallel_size", "use_torch_fsdp2"))
    assert layout == SCENARIOS[name][3], f"{name}: Megatron reports DP, CP, FSDP2 = {layout}"


def assert_same_steps(got, want, label):
    assert len(got.losses) == len(want.losses) == STEPS, label
    for step, (a, b) in enumerate(zip(got.losses, want.losses), start=1):
        assert math.isclose(a, b, rel_tol=1e-5), f"{label}: loss of step {step} {a} != {b}\n{got.log_path}"
    # grad norms are logged with 3 decimals
    for step, (a, b) in enumerate(zip(got.grad_norms, want.grad_norms), start=1):
        assert abs(a - b) <= 1e-3 + 1e-5 * abs(b), f"{label}: grad norm of step {step} {a} != {b}"


def test_single_process_trains_through_the_ascend_operators(runs, upstream_bed):
    log = runs("single")
    assert_layout("single", log)
    assert len(log.losses) == STEPS and all(math.isfinite(x) for x in log.losses + log.grad_norms)
    assert all(x > 0 for x in log.grad_norms)
    (calls,) = upstream_bed.op_calls("single")
    microbatches = STEPS * 4  # global batch 4, micro batch 1
    # vision tower: TND, no mask; text model: TND, compressed causal mask (sparse_mode 3), with backward
    assert calls.get("npu_fusion_attention:TND:sparse_mode0", 0) >= microbatches
    assert calls.get("npu_fusion_attention:TND:sparse_mode3", 0) >= microbatches
    assert calls.get("npu_fusion_attention:backward", 0) >= microbatches
    assert calls.get("npu_rms_norm", 0) > 0 and calls.get("npu_rotary_mul", 0) > 0


def test_dataset_mixes_images_and_videos(upstream_bed):
    import json

    samples = json.loads(upstream_bed.data_json.read_text())
    assert any(s["images"] for s in samples) and any(s["videos"] for s in samples)


@pytest.mark.parametrize("name", ["dp2", "cp2_ulysses", "cp2_ulysses_ddp"])
def test_two_process_layouts_match_the_single_process_losses(runs, upstream_bed, name):
    log = runs(name)
    assert_layout(name, log)
    assert_same_steps(log, runs("single"), name)
    assert len(upstream_bed.op_calls(name)) == 2


def test_registration_line_without_fcp_algo_leaves_training_unchanged(runs, upstream_bed):
    log = runs("single_fcp_line")
    assert_layout("single_fcp_line", log)
    assert logged_argument(log.text, "fcp_max_degree") is not None, "the registration line added no --fcp-* option"
    checkout = upstream_bed.checkout(register_fcp=True)
    from mindspeed_mm.core.fcp.commands.fcp_overlay import ENTRY_LINE

    assert ENTRY_LINE in (checkout.root / "pretrain_transformers.py").read_text()
    assert_same_steps(log, runs("single"), "single_fcp_line")


def test_the_log_parser_reads_grad_norms_that_another_rank_wrote_behind():
    from cpu_ascend.cpu_ascend_hooks import EXACT_GRAD_NORM_PREFIX
    from runner import parse_log

    text = (" iteration        1/       2 | loss: 5.775687 | grad norm: 1.337 |\n"
            f"{EXACT_GRAD_NORM_PREFIX} 1.3373620510101318[Rank 3 | Local Rank 3] INFO planning | groups: 4 |\n"
            " iteration        2/       2 | loss: 5.594673 | grad norm: 1.300 |\n"
            f"{EXACT_GRAD_NORM_PREFIX} 1.25e-05\n")
    losses, grads, _ = parse_log(text)
    assert losses == [5.775687, 5.594673]
    assert grads == [1.3373620510101318, 1.25e-05]
