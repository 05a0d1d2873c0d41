"""Per-document zigzag sharding: chunk rule, round trip, positions, local layout, errors."""
from __future__ import annotations

import pytest
import torch

from mindspeed_mm.core.fcp.parallel import (
    zigzag_layout,
    zigzag_positions,
    zigzag_shard,
    zigzag_unshard,
)

# Lengths from 1 token to a few hundred, most not divisible by 2 * degree.
MIXED_LENGTHS = [1, 2, 5, 11, 12, 37, 130, 257, 3]


def _cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)


def _expected_shard_indices(lengths: list[int], rank: int, degree: int) -> list[int]:
    """Rank's packed-batch indices built token by token from the chunk rule."""
    indices: list[int] = []
    start = 0
    for length in lengths:
        chunks: list[list[int]] = [[] for _ in range(2 * degree)]
        # Token t of a document lies in the chunk whose [begin, end) holds it; sizes differ by <= 1.
        bounds = [0]
        for chunk in range(2 * degree):
            bounds.append(bounds[-1] + length // (2 * degree) + (1 if chunk < length % (2 * degree) else 0))
        for token in range(length):
            chunk = next(c for c in range(2 * degree) if bounds[c] <= token < bounds[c + 1])
            chunks[chunk].append(start + token)
        indices += chunks[rank] + chunks[2 * degree - 1 - rank]
        start += length
    return indices


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 5, 6])
def test_shard_follows_chunk_rule_and_round_trips(degree: int) -> None:
    cu = _cu(MIXED_LENGTHS)
    total = int(cu[-1])
    x = torch.arange(total * 2, dtype=torch.float64).view(total, 2)
    shards = [zigzag_shard(x, cu, rank, degree) for rank in range(degree)]
    for rank, shard in enumerate(shards):
        expected = torch.tensor(_expected_shard_indices(MIXED_LENGTHS, rank, degree))
        torch.testing.assert_close(shard[:, 0], (expected * 2).to(torch.float64))
    assert sum(shard.shape[0] for shard in shards) == total
    torch.testing.assert_close(zigzag_unshard(shards, cu, degree), x)


@pytest.mark.parametrize("degree", [2, 3, 5])
def test_chunk_sizes_differ_by_at_most_one(degree: int) -> None:
    layout = zigzag_layout(_cu(MIXED_LENGTHS), degree)
    for doc, length in enumerate(MIXED_LENGTHS):
        sizes = []
        for shard in layout.shards:
            sizes += [int(shard.front_lengths[doc]), int(shard.back_lengths[doc])]
        assert sum(sizes) == length
        assert max(sizes) - min(sizes) <= 1


def test_short_documents_leave_ranks_empty() -> None:
    cu = _cu([1, 3])
    shards = [zigzag_shard(torch.arange(4), cu, rank, 3) for rank in range(3)]
    # 1-token doc: chunk 0 -> rank 0. 3-token doc: chunks 0, 1, 2 -> ranks 0, 1, 2.
    assert [s.tolist() for s in shards] == [[0, 1], [2], [3]]
    assert zigzag_unshard(shards, cu, 3).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("degree", [1, 3, 4])
def test_positions_are_positions_inside_each_document(degree: int) -> None:
    cu = _cu(MIXED_LENGTHS)
    global_positions = torch.cat([torch.arange(length) for length in MIXED_LENGTHS])
    for rank in range(degree):
        positions = zigzag_positions(cu, rank, degree)
        assert positions.dtype == torch.int64
        torch.testing.assert_close(positions, zigzag_shard(global_positions, cu, rank, degree))


@pytest.mark.parametrize("degree", [2, 5])
def test_local_layout_matches_front_and_back_chunks(degree: int) -> None:
    cu = _cu(MIXED_LENGTHS)
    layout = zigzag_layout(cu, degree)
    doc_of_token = torch.repeat_interleave(torch.arange(len(MIXED_LENGTHS)), torch.tensor(MIXED_LENGTHS))
    for rank in range(degree):
        shard = layout.shard(rank)
        docs = zigzag_shard(doc_of_token, cu, rank, degree)
        lengths = shard.front_lengths + shard.back_lengths
        assert shard.cu_seqlens.tolist() == [0, *lengths.cumsum(0).tolist()]
        torch.testing.assert_close(docs, torch.repeat_interleave(torch.arange(len(MIXED_LENGTHS)), lengths))
        assert shard.front_index.numel() == int(shard.front_lengths.sum())
        assert sorted(shard.front_index.tolist() + shard.back_index.tolist()) == list(range(shard.length))
        # Front tokens of a document precede its back tokens in position order.
        positions = shard.positions
        for doc in range(len(MIXED_LENGTHS)):
            front = positions[shard.front_index][docs[shard.front_index] == doc]
            back = positions[shard.back_index][docs[shard.back_index] == doc]
            if front.numel() and back.numel():
                assert int(front.max()) < int(back.min())


def test_shard_and_unshard_are_differentiable() -> None:
    cu = _cu([7, 20])
    x = torch.randn(27, 3, dtype=torch.float64, requires_grad=True)
    shards = [zigzag_shard(x, cu, rank, 2) for rank in range(2)]
    weights = torch.randn(27, 3, dtype=torch.float64)
    (zigzag_unshard(shards, cu, 2) * weights).sum().backward()
    torch.testing.assert_close(x.grad, weights)


def test_layout_is_cached_per_batch_and_degree() -> None:
    assert zigzag_layout(_cu([5, 9]), 3) is zigzag_layout([0, 5, 14], 3)
    assert zigzag_layout(_cu([5, 9]), 3) is not zigzag_layout(_cu([5, 9]), 2)


@pytest.mark.parametrize(
    "cu_seqlens, message",
    [
        ([0], "at least two"),
        ([1, 4], "start at 0"),
        ([0, 4, 4, 9], "document 1"),
        ([0, 5, 3], "document 1"),
        (torch.tensor([0.0, 3.0]), "integers"),
        (torch.tensor([[0, 3]]), "1-D"),
    ],
)
def test_bad_cu_seqlens_is_rejected(cu_seqlens: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        zigzag_layout(cu_seqlens, 2)


def test_bad_arguments_are_rejected() -> None:
    cu = _cu([4, 6])
    with pytest.raises(ValueError, match="degree"):
        zigzag_layout(cu, 0)
    with pytest.raises(ValueError, match="rank 2"):
        zigzag_shard(torch.zeros(10), cu, 2, 2)
    with pytest.raises(ValueError, match="10 rows"):
        zigzag_shard(torch.zeros(9), cu, 0, 2)
    with pytest.raises(ValueError, match="one shard per rank"):
        zigzag_unshard([torch.zeros(5)], cu, 2)
    with pytest.raises(ValueError, match="rank 1"):
        zigzag_unshard([zigzag_shard(torch.zeros(10), cu, 0, 2), torch.zeros(3)], cu, 2)
