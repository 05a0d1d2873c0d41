"""The planner sees the vision encoder: every group's predicted time includes its patches; the sampler
hands the batch's patches to it; the plan's vision work per rank (balance figures) is consistent."""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.sandbox.run_config import VideoDataConfig, load_run_config
from mindspeed_mm.core.fcp.sandbox.text_dataset import build_dataset
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.sandbox.vision.vision_balance import plan_vision_balance
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import build_video_dataset, video_layouts
from mindspeed_mm.core.fcp.runtime.media_pieces import assign_media, media_pieces
from mindspeed_mm.core.fcp.sandbox.vision.group_media import group_media
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout
from mindspeed_mm.core.fcp.simulate.workloads import generate_samples
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.planner import plan_batch

CONFIG = load_run_config("tiny_qwen3vl_fcp")


def test_sampler_hands_out_patches_only_for_video_data() -> None:
    video = PlanAwareSampler(build_video_dataset(CONFIG), CONFIG.training.global_batch_size, 2)
    patches = video.batch_patches(1)
    assert patches is not None
    np.testing.assert_array_equal(patches, video.dataset.vision_patches[8:16])
    text = load_run_config("tiny_qwen3_fcp")
    assert PlanAwareSampler(build_dataset(text), text.training.global_batch_size, 1).batch_patches(0) is None


def test_group_times_include_the_vision_term() -> None:
    sampler = PlanAwareSampler(build_video_dataset(CONFIG), CONFIG.training.global_batch_size, 3)
    planner = CONFIG.batch_planner(4)
    cost = planner.cost
    assert cost.coefficients.per_patch_ms > 0
    for step in range(3):
        lengths, patches = sampler.batch_lengths(step), sampler.batch_patches(step)
        plan = planner.plan(lengths, patches)
        for round_plan in plan.rounds:
            for group in round_plan.groups:
                with_vision = cost.group_time_ms(
                    cost.workload([int(lengths[s]) for s in group.samples], [int(patches[s]) for s in group.samples]),
                    group.degree, group.algo,
                )
                text_only = cost.group_time_ms(cost.workload([int(lengths[s]) for s in group.samples]),
                                               group.degree, group.algo)
                assert group.predicted_ms == pytest.approx(with_vision, rel=1e-9)
                assert with_vision > text_only
        assert plan.predicted_ms > planner.plan(lengths).predicted_ms


def _check_balance(plan: Plan, layouts: Sequence[VideoSampleLayout]) -> None:
    balance = plan_vision_balance(plan, layouts)
    total = sum(layout.vision_patches for layout in layouts)
    assert int(balance.rank_patches.sum()) == total
    for r, round_plan in enumerate(plan.rounds):
        for group in round_plan.groups:
            media = group_media([layouts[s] for s in group.samples], list(group.samples), group.degree)
            loads = media.member_patches
            assert balance.rank_patches[r, list(group.ranks)].tolist() == loads
            assert (balance.replicated[r, list(group.ranks)] == sum(loads)).all()
            largest = max(piece.patches for piece in media_pieces(media.items, group.degree))
            assert max(loads) <= sum(loads) / group.degree + largest
    ratios = balance.group_max_over_mean
    assert all(ratio >= 1.0 for ratio in ratios)
    assert 1.0 <= balance.weighted_group_max_over_mean <= max(ratios, default=1.0)
    assert balance.step_max_over_mean >= 1.0 and balance.replicated_over_split >= 1.0


def test_balance_of_a_scaled_openvid_batch() -> None:
    assert CONFIG.video_data is not None
    layouts = video_layouts(generate_samples("openvid", 48, 0), CONFIG.video_data, 2, CONFIG.model.seq_length)
    cost = CostModel.from_preset("cpu-tiny", max_tokens_per_rank=CONFIG.fcp.max_tokens_per_rank)
    plan = plan_batch([x.length for x in layouts], cost, SolverConfig(num_ranks=8, ranks_per_node=8),
                      patches=[x.vision_patches for x in layouts])
    _check_balance(plan, layouts)
    assert plan_vision_balance(plan, layouts).group_loads, "the batch should need multi-rank groups"


def test_balance_of_a_full_size_openvid_batch() -> None:
    full = VideoDataConfig(frame_scale=1, grid_scale=1, text_scale=1, min_caption_tokens=1, prompt_tokens=0)
    layouts = video_layouts(generate_samples("openvid", 32, 1), full, 2, 10**9)
    cost = CostModel.from_preset("a3-qwen3vl-8b", max_tokens_per_rank=6000)
    plan = plan_batch([x.length for x in layouts], cost, SolverConfig(num_ranks=8, ranks_per_node=8),
                      patches=[x.vision_patches for x in layouts])
    _check_balance(plan, layouts)
    # full-size clips have many frame groups per sample: cutting the long ones into frame-group ranges balances
    # the groups better than encoding every video whole
    whole = []
    for round_plan in plan.rounds:
        for group in round_plan.groups:
            if group.degree > 1:
                items = group_media([layouts[s] for s in group.samples], list(group.samples), group.degree).items
                loads = [0] * group.degree
                for item, owner in zip(items, assign_media([item.patches for item in items], group.degree)):
                    loads[owner] += item.patches
                whole.append(max(loads) * len(loads))  # the group's time lost to its slowest member, in patches
    split = plan_vision_balance(plan, layouts)
    total = sum(sum(loads) for loads in split.group_loads)
    assert split.weighted_group_max_over_mean < sum(whole) / total


def test_a_plan_on_more_ranks_than_frame_groups_leaves_ranks_idle_but_counts_them() -> None:
    layouts = [dataclasses.replace(video_layouts(generate_samples("openvid", 1, 0), VideoDataConfig(), 2, 500)[0],
                                   frame_groups=1)]
    cost = CostModel.from_preset("cpu-tiny", max_tokens_per_rank=8)
    plan = plan_batch([layouts[0].length], cost, SolverConfig(num_ranks=8, ranks_per_node=8),
                      patches=[layouts[0].vision_patches])
    balance = plan_vision_balance(plan, layouts)
    assert sorted(balance.rank_patches.sum(axis=0).tolist())[-1] == layouts[0].vision_patches
    assert balance.step_max_over_mean == pytest.approx(plan.num_ranks)
