"""Hybrid Ulysses x ring attention on gloo CP groups of degree 4 and 6 against the unsharded reference.

One spawned world of 6 ranks runs rounds whose groups split as 2 x 2 (beside a ring of 2), 2 x 3, 3 x 2 and,
in the degenerate forms a forced `hybrid` may take, 1 x 3 and 3 x 1. Every group checks its packed batch (and a
batch so short that some ranks hold no token) in fp32 and bf16, causal and full, MHA and GQA, outputs and
q / k / v gradients against float64 dense attention of the unsharded batch; and the bytes each rank sent
against the volume of the block's all-to-alls and the ring over the merged block shards.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from attention_reference import dense_case, unsharded_bf16, within_bf16_of_one_process
from distributed_utils import run_distributed
from mindspeed_mm.core.fcp.parallel import (
    CommGroupPool, CommStats, HybridGroup, fcp_attention, zigzag_layout, zigzag_shard,
)
from mindspeed_mm.core.fcp.solver.hybrid_split import HybridSplit, communicator_rank_sets

WORLD_SIZE = 6
# Per round: (group size, Ulysses degree u) of each group; u = None: a ring group beside the hybrid ones.
ROUNDS = (((4, 2), (2, None)), ((6, 2),), ((6, 3),), ((3, 1), (3, 3)))
HEADS, HEAD_DIM = 12, 8
KV_HEADS = (12, 2)


@dataclass(frozen=True)
class HybridCase:
    """What one rank checked in one case, with the bytes it sent."""

    split: tuple[int, int]
    """(u, r) of the group."""
    dtype: torch.dtype
    causal: bool
    kv_heads: int
    forward_bytes: int
    backward_bytes: int
    expected_bytes: tuple[int, int]
    """The volume the algorithm must send, computed from the layouts (forward, backward)."""


def _expected_bytes(cu: list[int], u: int, r: int, rank: int, kv_heads: int, element: int,
                    accumulation_element: int) -> tuple[int, int]:
    """Bytes rank `rank` sends: the all-to-alls inside its block (each member keeps its own 1 / u of the heads)
    and its ring over the merged block shards (K/V of heads / u repeated K/V heads per step; backward: K/V
    again and the gradients' full lap, accumulated at least in fp32)."""
    fine, merged = zigzag_layout(cu, u * r), zigzag_layout(cu, r, block=u)
    block, place = divmod(rank, u)
    own = fine.shard(rank).length
    members = [fine.shard(block * u + j).length for j in range(u)]
    kv = kv_heads
    while kv % u or HEADS % kv:  # repeated as Ulysses repeats them
        kv += kv_heads
    row = HEAD_DIM * element
    qkv_out = own * (u - 1) * (HEADS + 2 * kv) // u * row        # my tokens, the others' heads
    out_back = (sum(members) - own) * HEADS // u * row          # the others' tokens, my heads
    lengths = [merged.shard(i).length for i in range(r)]
    ring_row = 2 * (kv // u) * row
    ring_forward = sum(lengths[(block - step) % r] for step in range(r - 1)) * ring_row
    ring_backward = ring_forward + (sum(lengths) * ring_row * accumulation_element // element if r > 1 else 0)
    dout_out = own * (u - 1) * HEADS // u * row
    grads_back = (sum(members) - own) * (HEADS + 2 * kv) // u * row
    return qkv_out + ring_forward + out_back, dout_out + ring_backward + grads_back


def _check_group(ranks: list[int], group: HybridGroup, seed: int, rank: int) -> list[HybridCase]:
    degree, group_rank = len(ranks), ranks.index(rank)
    assert group.rank == group_rank
    cases = []
    for lengths in ([37, 2, 2 * degree + 1, 131, 1, 6], [1, 2]):
        cu = [0, *torch.tensor(lengths).cumsum(0).tolist()]
        for dtype in (torch.float32, torch.bfloat16):
            for causal in ((True, False) if dtype == torch.float32 else (True,)):
                for kv_heads in KV_HEADS:
                    (q, k, v), dout, expected = dense_case(cu, HEADS, kv_heads, HEAD_DIM, causal=causal,
                                                           seed=seed * 100 + kv_heads + causal)
                    local = [zigzag_shard(x, cu, group_rank, degree).to(dtype).requires_grad_() for x in (q, k, v)]
                    stats = CommStats()
                    out = fcp_attention(*local, cu, group=group, algo="hybrid", causal=causal, comm_stats=stats)
                    out.backward(zigzag_shard(dout, cu, group_rank, degree).to(dtype))
                    split = (group.ulysses_degree, group.ring_degree)
                    got = [out] + [x.grad for x in local]
                    unsharded = unsharded_bf16(q, k, v, dout, cu, causal) if dtype == torch.bfloat16 else None
                    for index, name in enumerate(("out", "dq", "dk", "dv")):
                        want = zigzag_shard(expected[index], cu, group_rank, degree)
                        what = f"{name} {split} {dtype} causal={causal} kv={kv_heads} {lengths}"
                        assert got[index].dtype == dtype, what
                        if unsharded is None:
                            torch.testing.assert_close(got[index], want.to(dtype), msg=lambda m: f"{what}: {m}")
                        else:
                            within_bf16_of_one_process(got[index], want, zigzag_shard(unsharded[index], cu,
                                                                                       group_rank, degree), what)
                    element = torch.empty(0, dtype=dtype).element_size()
                    cases.append(HybridCase(split, dtype, causal, kv_heads, stats.forward_bytes_sent,
                                            stats.backward_bytes_sent,
                                            _expected_bytes(cu, *split, group_rank, kv_heads, element, 4)))
    return cases


def _hybrid_world(rank: int, world_size: int) -> list[HybridCase]:
    pool = CommGroupPool()
    cases: list[HybridCase] = []
    for round_index, groups in enumerate(ROUNDS):
        layout, start = [], 0
        for size, u in groups:
            layout.append((list(range(start, start + size)), u))
            start += size
        pool.prewarm([rank_set for ranks, u in layout for rank_set in communicator_rank_sets(
            ranks, None if u is None else HybridSplit(u, len(ranks) // u))])
        for group_index, (ranks, u) in enumerate(layout):
            if rank not in ranks:
                continue
            if u is None:  # the ring beside the hybrid group runs on its own communicator at the same time
                x = torch.randn(5, HEADS, HEAD_DIM)
                fcp_attention(x, x, x, [0, 10], group=pool.get(ranks), algo="ring")
                continue
            cases += _check_group(ranks, HybridGroup.from_pool(pool, ranks, u, rank), round_index * 10 + group_index,
                                  rank)
    return cases


@pytest.fixture(scope="module")
def cases() -> list[HybridCase]:
    per_rank = run_distributed(_hybrid_world, WORLD_SIZE, timeout_s=300)
    return [case for rank_cases in per_rank for case in rank_cases]


def test_every_split_dtype_mask_and_head_layout_matches_the_unsharded_reference(cases: list[HybridCase]) -> None:
    # The comparisons ran inside the ranks; here: every required combination was checked.
    checked = {(c.split, c.dtype, c.causal, c.kv_heads < HEADS) for c in cases}
    for split in ((2, 2), (2, 3), (3, 2), (1, 3), (3, 1)):
        for gqa in (False, True):
            assert (split, torch.bfloat16, True, gqa) in checked
            for causal in (True, False):
                assert (split, torch.float32, causal, gqa) in checked


def test_bytes_sent_are_the_block_all_to_alls_and_the_ring_over_merged_shards(cases: list[HybridCase]) -> None:
    for case in cases:
        assert (case.forward_bytes, case.backward_bytes) == case.expected_bytes, case


def _runs(values: list[int]) -> list[list[int]]:
    """`values` cut into runs of consecutive integers."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return runs


def test_merged_block_shards_are_the_union_of_their_ranks_shards() -> None:
    """The reasoning hybrid attention rests on, with documents that 2 * degree does not divide: the u consecutive
    ranks of block i hold together one front and one back run of each document (front first), which is shard i
    of the merged layout; the plain zigzag over r ranks cuts the documents elsewhere."""
    cu = [0, 10, 11, 38, 45]
    for u, r in ((2, 2), (2, 3), (3, 2), (4, 1), (1, 4)):
        fine, merged = zigzag_layout(cu, u * r), zigzag_layout(cu, r, block=u)
        for block in range(r):
            union = torch.cat([fine.shard(block * u + j).global_index for j in range(u)])
            shard = merged.shard(block)
            assert sorted(union.tolist()) == sorted(shard.global_index.tolist())
            bounds = shard.cu_seqlens.tolist()
            for doc in range(len(cu) - 1):
                tokens = shard.global_index[bounds[doc]:bounds[doc + 1]].tolist()
                front = int(shard.front_lengths[doc])
                assert len(_runs(tokens[:front])) <= 1 and len(_runs(tokens[front:])) <= 1
                assert tokens == sorted(tokens)
    plain, merged = zigzag_layout(cu, 2), zigzag_layout(cu, 2, block=2)
    assert [s.global_index.tolist() for s in plain.shards] != [s.global_index.tolist() for s in merged.shards]
