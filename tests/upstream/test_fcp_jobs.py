"""Real MindSpeed-MM jobs with `fcp_cp_algo`: data-loader workers, save and resume through upstream's checkpointing.

Three launches of the tiny Qwen3-VL on 4 gloo processes under FSDP2, 6 steps, recalibration on (the default):

- `workers`: `num_workers: 2` and `prefetch_factor: 2`, saving at steps 3 and 6 (optimizer and RNG included);
- `serial`: the same without workers;
- `resumed`: `workers` loaded from its step-3 checkpoint and trained to step 6.

With workers the run reaches `train_iters` and saves, and trains like the run without workers (the first two
steps' plans, made before anything is measured, are identical; every loss within 1e-5). The resumed run
plans steps 4 and 5 exactly as the uninterrupted run (their plans read the calibration saved at step 3), so
their losses are bit-identical; step 6 is planned from the resumed run's own step-4 times.
"""
from __future__ import annotations

import json
import math
import re

import pytest

FCP = {"fcp_preset": "cpu-tiny", "fcp_max_tokens_per_rank": 70, "fcp_log_plan": True}
TRAINING = {"lr": 1e-3, "min_lr": 1e-3, "lr_warmup_fraction": None, "lr_warmup_iters": 0}
KEEP_STATE = {"no_save_optim": None, "no_save_rng": None, "no_load_optim": None, "no_load_rng": None}
STEPS = 6
PLAN_LINE = re.compile(r"\[Rank 0 \|.*FCP plan of step (\d+): (.*), waited")


@pytest.fixture(scope="module")
def jobs(upstream_bed, tmp_path_factory):
    save = tmp_path_factory.mktemp("fcp_checkpoints")

    def recipe(workers: int, **extra: object) -> dict:
        built = upstream_bed.recipe(cp_algo="fcp_cp_algo", train_iters=STEPS, global_batch_size=8,
                                    extra_gpt={**TRAINING, **FCP, **KEEP_STATE, "num_workers": workers, **extra})
        loader = built["data"]["dataloader_param"]
        loader["sampler_type"] = "FCPBatchSampler"
        if workers:
            loader["prefetch_factor"] = 2
        return built

    runs = {
        "workers": upstream_bed.run(recipe(2, save=str(save), save_interval=3), 4, name="jobs_workers",
                                    register_fcp=True),
        "serial": upstream_bed.run(recipe(0), 4, name="jobs_serial", register_fcp=True),
    }
    runs["resumed"] = upstream_bed.run(recipe(2, load=str(save), ckpt_step=3), 4, name="jobs_resumed", register_fcp=True,
                                       expect_steps=STEPS - 3)
    for name, log in runs.items():
        print(f"[upstream FCP jobs] {name}: wall={log.wall_s:.1f}s losses={log.losses}")
    return runs, save


def plans(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in PLAN_LINE.finditer(text)}


def test_workers_reach_train_iters_save_and_train_like_the_serial_run(jobs) -> None:
    runs, save = jobs
    workers, serial = runs["workers"], runs["serial"]
    assert len(workers.losses) == len(serial.losses) == STEPS
    for step, (got, want) in enumerate(zip(workers.losses, serial.losses), start=1):
        assert math.isclose(got, want, rel_tol=1e-5), f"loss of step {step}: workers {got}, serial {want}"
    assert [plans(workers.text)[s] for s in (1, 2)] == [plans(serial.text)[s] for s in (1, 2)]
    for iteration in (3, 6):
        state = json.loads((save / f"iter_{iteration:07d}" / "fcp_state.json").read_text())
        assert state["steps_done"] == iteration and state["calibration"]["after_step"]


def test_a_resumed_run_plans_and_trains_as_the_uninterrupted_one(jobs) -> None:
    runs, _ = jobs
    whole, resumed = runs["workers"], runs["resumed"]
    assert "FCP: resuming from the state of step 3" in resumed.text
    assert sorted(plans(resumed.text)) == [4, 5, 6]
    for step in (4, 5):
        assert plans(resumed.text)[step] == plans(whole.text)[step], f"plan of step {step}"
    assert resumed.losses[:2] == whole.losses[3:5]
    assert math.isclose(resumed.losses[2], whole.losses[5], rel_tol=1e-5)
