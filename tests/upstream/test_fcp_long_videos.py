"""FCP with long videos split over the ranks of their round trains upstream's Qwen3-VL as one process does.

The tiny Qwen3-VL trains 4 steps of global batch 8 on a dataset whose every fourth sample is a 24 s video (48
frames kept at 2 fps: 24 frame groups, 738 tokens) among images and short videos, with the keys of the tiny CPU
example (`fcp_max_tokens_per_rank: 256`, `fcp_max_degree: 3`): a long video needs a group of 3 ranks; its round
encodes it in ranges of its frame groups (`media_pieces`) over all 4 ranks, the rank of the other
group receiving a range's pixels and sending its feature rows back (`encode_media_over_round`). FCP on 4 gloo
processes against one process without FCP, under FSDP2 and under Megatron DDP, each with a trainable vision
tower and with upstream's frozen one; every step's loss within 1e-5 and grad norm within 1e-4 (relative).
"""
from __future__ import annotations

import re

import pytest

from conftest import bed_or_skip
from harness import UpstreamBed
from test_fcp_training import assert_trains_like_one_process, degrees_used

STEPS = 4
GLOBAL_BATCH = 8
SEQ_LENGTH = 1024
LONG_VIDEO_DATA = {"video_max_pixels": 16384, "video_min_pixels": 0, "video_fps": 2.0, "video_maxlen": 64}
FCP_KEYS = {"fcp_preset": "cpu-tiny", "fcp_max_tokens_per_rank": 256, "fcp_max_degree": 3, "fcp_log_plan": True}
TRAINING = {"lr": 1e-3, "min_lr": 1e-3, "lr_warmup_fraction": None, "lr_warmup_iters": 0}
SPREAD_LINE = re.compile(r"the round's (\d+) media of \d+ patches encoded over its 4 ranks as (\d+) pieces, "
                         r"(\d+) patches outside their group")


@pytest.fixture(scope="module")
def long_video_bed(tmp_path_factory) -> UpstreamBed:
    return bed_or_skip(tmp_path_factory.mktemp("upstream_bed_long_videos"), long_videos=True)


@pytest.fixture(scope="module")
def runs(long_video_bed):
    def recipe(fcp: bool, fsdp2: bool, trainable_vision: bool) -> dict:
        built = long_video_bed.recipe(cp_algo="fcp_cp_algo" if fcp else "ulysses_cp_algo", fsdp2=fsdp2,
                                      train_iters=STEPS, global_batch_size=GLOBAL_BATCH,
                                      extra_gpt=dict(TRAINING, seq_length=SEQ_LENGTH, **(FCP_KEYS if fcp else {})))
        built["data"]["dataset_param"]["preprocess_parameters"].update(LONG_VIDEO_DATA)
        encoder = built["model"]["image_encoder"]
        encoder["vision_encoder"]["freeze"] = encoder["vision_projector"]["freeze"] = not trainable_vision
        if fcp:
            built["data"]["dataloader_param"]["sampler_type"] = "FCPBatchSampler"
        return built

    cases = {f"{'fsdp2' if fsdp2 else 'ddp'}_{'trainable' if trainable else 'frozen'}": (fsdp2, trainable)
             for fsdp2 in (True, False) for trainable in (True, False)}
    done = long_video_bed.run_many([dict(recipe=recipe(False, fsdp2, trainable), nproc=1, name=f"single_{case}")
                                    for case, (fsdp2, trainable) in cases.items()])
    for case, (fsdp2, trainable) in cases.items():
        done[f"fcp_{case}"] = long_video_bed.run(recipe(True, fsdp2, trainable), 4, name=f"fcp_{case}",
                                                 register_fcp=True)
    for name, log in done.items():
        print(f"[upstream FCP long videos] {name}: wall={log.wall_s:.1f}s losses={log.losses} "
              f"grad_norms={log.grad_norms}")
    return done


@pytest.mark.parametrize("case", ["fsdp2_trainable", "fsdp2_frozen", "ddp_trainable", "ddp_frozen"])
def test_long_videos_split_across_their_group_train_like_one_process(runs, case) -> None:
    fcp, single = runs[f"fcp_{case}"], runs[f"single_{case}"]
    assert_trains_like_one_process(fcp, single, STEPS, case)
    # The long videos ran on groups of 3 ranks (and others on 2); their rounds cut them into frame-group ranges
    # and encoded some of those on the rank outside their group.
    degrees = degrees_used(fcp.text)
    assert {2, 3} <= degrees, degrees
    spread = [tuple(int(v) for v in m.groups()) for m in SPREAD_LINE.finditer(fcp.text)]
    assert any(pieces > media and outside > 0 for media, pieces, outside in spread), spread
