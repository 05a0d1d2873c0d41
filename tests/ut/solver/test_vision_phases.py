"""Lockstep rounds with vision work priced as an encoder phase then a decoder phase (`vision_phases`), against
the cost model's own group times (a group's time with its patches minus its time without them is its encoder
call), and the planner's plans so priced."""
import dataclasses

import numpy as np
import pytest

from mindspeed_mm.core.fcp.cost.builder import frozen_vision_table
from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import InvalidPlanError, Plan, SolverConfig, plan_batch, validate_plan
from mindspeed_mm.core.fcp.solver.baselines import BaselineInfeasibleError, static_layout_plan
from mindspeed_mm.core.fcp.solver.plan import GroupPlan, RoundPlan
from mindspeed_mm.core.fcp.solver.static_layout import static_degrees
from mindspeed_mm.core.fcp.solver.step_time import LOCKSTEP, round_floor, step_ms
from mindspeed_mm.core.fcp.solver.vision_phases import (
    RECORD_BYTES, priced_in_phases, vision_exchange_ms, vision_phase_ms, vision_rank_ms,
)
from scenario_costs import a3_scenario

RING = "ring"


def _encoder_ms(cost: CostModel, lengths: list[int], patches: list[int], degree: int) -> float:
    """A group's encoder call per rank, from the cost model's group times with and without its patches."""
    with_media = cost.group_time_ms(cost.workload(lengths, patches), degree, RING, node_part=degree)
    text = cost.group_time_ms(cost.workload(lengths), degree, RING, node_part=degree)
    return float(with_media - text)


def _two_group_plan(lengths: list[int]) -> Plan:
    """Round of two 2-rank ring groups: samples 0-1 on ranks 0-1, samples 2-3 on ranks 2-3 (prices filled later)."""
    groups = (GroupPlan((0, 1), 2, RING, (0, 1), 0.0), GroupPlan((2, 3), 2, RING, (2, 3), 0.0))
    return Plan((RoundPlan(groups, 0.0),), 0.0, 0.0, 0.0, 4)


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return a3_scenario(shard_ranks=4)


def test_a_round_lasts_its_slowest_encoder_call_then_its_slowest_decoder(cost):
    # Group A: a long video and little text; group B: long text and no media.
    lengths, patches = [2000, 1000, 9000, 8000], [60000, 0, 0, 0]
    plan = priced_in_phases(_two_group_plan(lengths), lengths, patches, cost, 16, over_round=False)
    encoder = _encoder_ms(cost, [2000, 1000], [60000, 0], 2)
    text = [float(cost.group_time_ms(cost.workload(lengths[i:i + 2]), 2, RING, node_part=2)) for i in (0, 2)]
    (round_plan,) = plan.rounds
    assert round_plan.vision_ms == pytest.approx(encoder, rel=1e-9)
    assert [g.predicted_ms for g in round_plan.groups] == pytest.approx([encoder + t for t in text], rel=1e-9)
    assert round_plan.predicted_ms == pytest.approx(encoder + max(text), rel=1e-9)
    # Longer than each group's own encoder and decoder work, which is what a group alone would take.
    assert round_plan.predicted_ms > max(encoder + text[0], text[1]) * 1.01
    validate_plan(plan, lengths, cost, patches, priced=True)


def test_spread_over_the_round_the_phase_is_the_round_share_plus_the_exchange(cost):
    lengths, patches = [2000, 1000, 9000, 8000], [60000, 0, 0, 0]
    plan = priced_in_phases(_two_group_plan(lengths), lengths, patches, cost, 16, over_round=True)
    (round_plan,) = plan.rounds
    share = _encoder_ms(cost, [2000], [15000], 1)  # 60,000 patches over 4 ranks
    # Group A's ranks each hold 30,000 patches, 15,000 more than the share: that moves.
    exchange = vision_exchange_ms(cost, 15000)
    records = 2 * cost.table.time.all_to_all_inter_ms(RECORD_BYTES)  # who holds which media, who needs which rows
    assert round_plan.vision_over_round
    assert round_plan.vision_ms == pytest.approx(share + records + exchange, rel=1e-9)
    assert 0 < exchange < 0.1 * share
    assert round_plan.vision_ms < vision_phase_ms(round_plan, patches, cost, over_round=False)
    validate_plan(plan, lengths, cost, patches, priced=True)
    # A round whose groups hold equal shares moves nothing and keeps its media in its groups.
    even = priced_in_phases(_two_group_plan(lengths), lengths, [30000, 0, 30000, 0], cost, 16, over_round=True)
    assert not even.rounds[0].vision_over_round
    assert even.rounds[0].vision_ms == pytest.approx(_encoder_ms(cost, [2000], [15000], 1), rel=1e-9)


def test_the_exchange_moves_pixels_rows_and_with_a_trainable_encoder_their_gradients(cost):
    frozen = CostModel(frozen_vision_table(cost.table))
    inter = cost.table.time.all_to_all_inter_ms
    vision = cost.table.model.vision
    row_bytes = cost.table.model.hidden * vision.mergers * 2 / vision.spatial_merge ** 2  # bf16 rows
    pixel_bytes = 3 * vision.temporal_patch * vision.patch_size ** 2 * 4  # float32 pixels
    assert vision.mergers == 4  # Qwen3-VL: the merger and three DeepStack mergers
    assert vision_exchange_ms(cost, 1000) == pytest.approx(inter(1000 * pixel_bytes) + 2 * inter(1000 * row_bytes))
    assert vision_exchange_ms(frozen, 1000) == pytest.approx(inter(1000 * pixel_bytes) + inter(1000 * row_bytes))
    assert vision_exchange_ms(cost, 0) == 0.0


def test_a_round_priced_below_its_vision_phase_is_refused(cost):
    lengths, patches = [2000, 1000, 9000, 8000], [60000, 0, 0, 0]
    plan = priced_in_phases(_two_group_plan(lengths), lengths, patches, cost, 16, over_round=False)
    (round_plan,) = plan.rounds
    cheap = dataclasses.replace(round_plan, vision_ms=round_plan.vision_ms / 2)
    with pytest.raises(InvalidPlanError, match="vision phase"):
        validate_plan(dataclasses.replace(plan, rounds=(cheap,)), lengths, cost, patches, priced=True)
    # The vision fields survive JSON; a round without them writes none (older plans keep their digest).
    assert Plan.from_json(plan.to_json()) == plan
    assert "vision_ms" not in _two_group_plan(lengths).rounds[0].to_json()


@pytest.mark.parametrize("over_round", [True, False])
@pytest.mark.parametrize("workload,ranks", [("internvid", 32), ("imagevideo", 32), ("openvid", 16)])
def test_lockstep_plans_with_media_are_priced_in_phases_and_beat_every_static_layout_so_priced(workload, ranks,
                                                                                                over_round):
    cost = a3_scenario(shard_ranks=ranks)
    config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node, vision_over_round=over_round)
    spread_rounds = 0
    for seed in range(2):
        lengths, patches = draw_lengths(workload, 8 * ranks, seed)
        plan = plan_batch(lengths, cost, config, patches)
        validate_plan(plan, lengths, cost, patches, priced=True)
        assert all(r.vision_ms is not None for r in plan.rounds)
        spread_rounds += sum(r.vision_over_round for r in plan.rounds)
        mine = step_ms(plan, cost, LOCKSTEP)
        for algo in cost.algos:
            for degree in static_degrees(int(np.max(lengths)), cost, config, algo):
                try:
                    static = static_layout_plan(lengths, cost, config, patches, cp_degree=degree, algo=algo,
                                                semantics=LOCKSTEP)
                except BaselineInfeasibleError:
                    continue
                # Static CP encodes each group's media on its own members, priced in the same phases.
                assert all(r.vision_ms is not None and not r.vision_over_round for r in static.rounds)
                assert mine <= step_ms(static, cost, LOCKSTEP) * (1 + 1e-12), (seed, algo, degree)
    assert spread_rounds > 0 if over_round else spread_rounds == 0


def test_the_search_of_rounds_spreading_their_media_counts_each_round_s_encoder_call_floor(cost):
    # The call on one merge block is the encoder's fixed cost; under FSDP it lengthens the pass before the
    # round's parameter traffic is weighed against it.
    floor = round_floor(cost, LOCKSTEP)
    call = vision_rank_ms(cost, 1)
    searched = dataclasses.replace(floor, per_round_ms=call)
    assert call > 0 and vision_rank_ms(cost, 0) == 0.0
    for pass_ms in (0.0, 10.0, 1e5):
        assert searched.round_ms(pass_ms) == pytest.approx(cost.step.lockstep_round_ms(pass_ms + call))
    assert searched.traffic_ms == pytest.approx(cost.step.lockstep_round_ms(call))
