"""Frame-group split and vision-token routing, on metadata: every frame group encoded by exactly one
rank, LPT balance bound, determinism, and (simulating the all-to-all of all ranks in one process)
every rank receiving exactly the vision tokens of its zigzag shard, at the right rows."""
from __future__ import annotations

import pytest
import torch

from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths
from mindspeed_mm.core.fcp.sandbox.vision.exchange import vision_routing
from mindspeed_mm.core.fcp.sandbox.vision.frames import (
    assign_frame_units,
    frame_units,
    rank_patch_loads,
    split_group_vision,
    token_holders,
)
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout
from mindspeed_mm.core.fcp.parallel import zigzag_layout


def _layout(groups: int, rows: int, cols: int, prompt: int = 2, caption: int = 3) -> VideoSampleLayout:
    return VideoSampleLayout(prompt_tokens=prompt, frame_groups=groups, grid_rows=rows, grid_cols=cols,
                             caption_tokens=caption, spatial_merge_size=2)


LAYOUTS = [_layout(3, 2, 3), _layout(1, 1, 2), _layout(5, 2, 2), _layout(2, 3, 3, prompt=0), _layout(1, 1, 1)]
INDICES = [40, 41, 42, 43, 44]


def test_units_cover_every_frame_group_in_packed_order() -> None:
    starts = cumulative_lengths([layout.length for layout in LAYOUTS])[:-1].tolist()
    units = frame_units(LAYOUTS, INDICES, starts)
    assert [(u.sample_index, u.group) for u in units] == [
        (INDICES[d], g) for d, layout in enumerate(LAYOUTS) for g in range(layout.frame_groups)
    ]
    for unit in units:
        layout = LAYOUTS[unit.doc]
        assert unit.token_start == starts[unit.doc] + layout.prompt_tokens + unit.group * layout.tokens_per_group
        assert (unit.tokens, unit.patches) == (layout.tokens_per_group, 4 * layout.tokens_per_group)
    with pytest.raises(ValueError, match="one sample index and one start per layout"):
        frame_units(LAYOUTS, INDICES[:2], starts)


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 5, 7, 16])
def test_each_unit_has_one_owner_and_loads_are_balanced(degree: int) -> None:
    work = split_group_vision(LAYOUTS, INDICES, degree)
    assert len(work.owners) == len(work.units) and all(0 <= o < degree for o in work.owners)
    loads = work.rank_patches
    assert sum(loads) == sum(layout.vision_patches for layout in LAYOUTS)
    # list scheduling onto the least loaded rank: max <= mean + the largest unit
    assert max(loads) <= sum(loads) / degree + max(u.patches for u in work.units)
    if degree >= len(work.units):
        assert sorted(loads, reverse=True)[: len(work.units)] == sorted((u.patches for u in work.units), reverse=True)
    assert split_group_vision(LAYOUTS, INDICES, degree).owners == work.owners


def test_lpt_is_optimal_on_a_textbook_case() -> None:
    # units of 12, 12, 8, 8, 8, 8 patches (merged tokens 3, 3, 2, 2, 2, 2) on 2 ranks: 28 / 28
    layouts = [_layout(1, 1, 3)] * 2 + [_layout(1, 1, 2)] * 4
    work = split_group_vision(layouts, list(range(6)), 2)
    assert work.rank_patches == [28, 28]


def test_equal_loads_go_to_the_rank_holding_the_tokens() -> None:
    # 10 tokens on 2 ranks: rank 1 holds tokens 3..7, where both frame groups (tokens 4-5, 6-7) lie.
    # The first unit meets equal loads and goes to rank 1, which holds it; the second goes by load.
    layouts = [_layout(2, 2, 1, prompt=4, caption=2)]
    work = split_group_vision(layouts, [0], 2)
    assert [(u.token_start, u.tokens) for u in work.units] == [(4, 2), (6, 2)]
    assert work.owners == (1, 0)


def test_loads_helper_and_bad_degree() -> None:
    units = split_group_vision(LAYOUTS, INDICES, 3).units
    assert rank_patch_loads(units, [0] * len(units), 2) == [sum(u.patches for u in units), 0]
    with pytest.raises(ValueError, match="degree must be >= 1"):
        assign_frame_units(units, 0, torch.zeros(0, dtype=torch.int64))


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 6])
def test_simulated_exchange_delivers_each_shard_its_vision_tokens(degree: int) -> None:
    work = split_group_vision(LAYOUTS, INDICES, degree)
    layout = work.zigzag
    routings = [vision_routing(work.units, work.owners, layout, work.holders, r) for r in range(degree)]
    # what each rank "encodes": the packed index of each of its rows, as data
    encoded = [routing.local_tokens.clone() for routing in routings]
    for rank, routing in enumerate(routings):
        owned = [u for u, o in zip(work.units, work.owners) if o == rank]
        expected = [u.token_start + i for u in owned for i in range(u.tokens)]
        assert routing.local_tokens.tolist() == expected
        assert sum(routing.send_splits) == len(expected)
    for receiver, routing in enumerate(routings):
        received = []
        for sender in range(degree):
            rows = encoded[sender][routings[sender].send_order]
            offset = sum(routings[sender].send_splits[:receiver])
            chunk = rows[offset : offset + routings[sender].send_splits[receiver]]
            assert chunk.numel() == routing.recv_splits[sender]
            received.append(chunk)
        received_tokens = torch.cat(received)
        shard_index = layout.shard(receiver).global_index
        # each received row lands on the shard row of that very token
        assert torch.equal(shard_index[routing.recv_positions], received_tokens)
        is_vision = torch.zeros(layout.total_tokens, dtype=torch.bool)
        for unit in work.units:
            is_vision[unit.token_start : unit.token_start + unit.tokens] = True
        assert sorted(routing.recv_positions.tolist()) == torch.nonzero(is_vision[shard_index]).reshape(-1).tolist()


def test_routing_rejects_inconsistent_inputs() -> None:
    work = split_group_vision(LAYOUTS, INDICES, 2)
    with pytest.raises(ValueError, match="outside a group of degree 2"):
        vision_routing(work.units, work.owners, work.zigzag, work.holders, 2)
    with pytest.raises(ValueError, match="one owner per unit"):
        vision_routing(work.units, work.owners[:-1], work.zigzag, work.holders, 0)
    holders = token_holders(zigzag_layout([0, 10], 2))
    # chunks of 3, 3, 2, 2 tokens; rank 0 holds chunks 0 and 3
    assert holders.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0, 0]
