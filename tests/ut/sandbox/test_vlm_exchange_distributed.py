"""Vision-token exchange on 3 gloo ranks: each rank receives exactly the rows of its shard's vision
tokens from the ranks that encoded them, and the backward pass returns every row's gradient to its
encoder; ranks that encode nothing, or neither send nor receive, still take part (no hang)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from distributed_utils import run_distributed
from mindspeed_mm.core.fcp.sandbox.vision.exchange import exchange_vision_tokens, vision_routing
from mindspeed_mm.core.fcp.sandbox.vision.frames import split_group_vision
from mindspeed_mm.core.fcp.sandbox.vision.layout import VideoSampleLayout

WORLD_SIZE = 3
HIDDEN = 5


def _layout(groups: int, rows: int, cols: int, prompt: int, caption: int) -> VideoSampleLayout:
    return VideoSampleLayout(prompt_tokens=prompt, frame_groups=groups, grid_rows=rows, grid_cols=cols,
                             caption_tokens=caption, spatial_merge_size=2)


CASES = {
    # many frame groups of different sizes over several samples
    "mixed": [_layout(3, 2, 3, 2, 3), _layout(1, 1, 2, 2, 3), _layout(4, 2, 2, 0, 1), _layout(2, 3, 1, 1, 2)],
    # one vision token, held and encoded by rank 2: ranks 0 and 1 neither send nor receive
    "single_token": [_layout(1, 1, 1, 10, 10)],
}


def _all_cases(rank: int, world_size: int) -> dict[str, dict]:
    """One world for all cases: spawning is the slow part."""
    return {name: _exchange(rank, world_size, name) for name in sorted(CASES)}


def _exchange(rank: int, world_size: int, name: str) -> dict:
    layouts = CASES[name]
    work = split_group_vision(layouts, list(range(len(layouts))), world_size)
    routing = vision_routing(work.units, work.owners, work.zigzag, work.holders, rank)
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(work.zigzag.total_tokens, HIDDEN, generator=generator, dtype=torch.float64)
    weights = torch.randn(work.zigzag.total_tokens, HIDDEN, generator=generator, dtype=torch.float64)
    encoded = values[routing.local_tokens].clone().requires_grad_(True)
    received = exchange_vision_tokens(encoded, routing, dist.group.WORLD)

    shard_tokens = work.zigzag.shard(rank).global_index
    # as the model does: write the received rows into the shard's embeddings
    embeddings = torch.zeros(shard_tokens.numel(), HIDDEN, dtype=torch.float64).index_copy(
        0, routing.recv_positions, received
    )
    (embeddings * weights[shard_tokens]).sum().backward()
    torch.testing.assert_close(received, values[shard_tokens[routing.recv_positions]], rtol=0, atol=0)
    torch.testing.assert_close(encoded.grad, weights[routing.local_tokens], rtol=0, atol=0)
    return {"sent": sum(routing.send_splits), "received": routing.recv_positions.numel()}


def test_exchange_forward_and_backward() -> None:
    per_rank = run_distributed(_all_cases, WORLD_SIZE, timeout_s=300)
    for name, layouts in CASES.items():
        counts = [ranks[name] for ranks in per_rank]
        vision_tokens = sum(layout.vision_tokens for layout in layouts)
        assert sum(c["sent"] for c in counts) == sum(c["received"] for c in counts) == vision_tokens, name
    assert [ranks["single_token"] for ranks in per_rank[:2]] == [{"sent": 0, "received": 0}] * 2
