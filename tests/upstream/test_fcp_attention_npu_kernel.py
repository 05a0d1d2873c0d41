"""FCP's ring, Ulysses and hybrid attention through its `npu_fusion` adapter on the CPU `npu_fusion_attention`.

Three gloo processes run rounds whose groups have degrees 3, 1 and 2; every group attends its zigzag-sharded
packed batch (documents of 1 to 13 tokens, so some chunks are empty) with `fcp_attention(kernel="npu_fusion")`,
causal and full, MHA and GQA, against float64 dense attention of the unsharded batch, once with the softmax
statistics passed as TND (`softmax_layout`) and once converted from the kernel's default per-segment NTD order.
Six processes run hybrid groups split 2 x 2, 2 x 3 and 3 x 2 the same way, causal, in fp32 and in bf16 (within
the error of one process attending the whole batch in bf16 through the same adapter), with the statistics
converted from NTD (the per-segment conversion a ring merge needs; the bed's training run takes TND).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from cpu_ascend_fixture import CPU_ASCEND

UT = Path(__file__).resolve().parents[1] / "ut"
WORLD_SIZE = 3
ROUNDS = ((3,), (1, 2))
LENGTHS = (1, 2, 7, 13, 4, 9)
HEADS, HEAD_DIM = 6, 8
ADAPTER = "mindspeed_mm.core.fcp.parallel.kernels.npu_fusion"


def _world(rank: int, world_size: int, tnd_statistics: bool) -> dict:
    sys.path.insert(0, str(CPU_ASCEND))
    sys.path.insert(0, str(UT))
    import torch_npu  # noqa: F401  (the CPU surface)
    from attention_reference import dense_attention
    from torch_npu._trace import CALLS

    from mindspeed_mm.core.fcp.parallel import CommGroupPool, fcp_attention, zigzag_shard
    from mindspeed_mm.core.fcp.parallel.kernels import get_kernel

    get_kernel("npu_fusion").kernel.tnd_statistics = tnd_statistics
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()])
    pool, checked = CommGroupPool(), []
    for sizes in ROUNDS:
        groups, start = [], 0
        for size in sizes:
            groups.append(list(range(start, start + size)))
            start += size
        pool.prewarm(groups)
        ranks = next(g for g in groups if rank in g)
        degree, group_rank = len(ranks), ranks.index(rank)
        for causal in (True, False):
            for kv_heads in (HEADS, 2):
                generator = torch.Generator().manual_seed(degree * 10 + kv_heads + causal)
                q, k, v, dout = (torch.randn(int(cu[-1]), heads, HEAD_DIM, dtype=torch.float64, generator=generator)
                                 for heads in (HEADS, kv_heads, kv_heads, HEADS))
                full = [x.clone().requires_grad_() for x in (q, k, v)]
                expected_out = dense_attention(*full, cu.tolist(), causal=causal)
                expected_out.backward(dout)
                expected = [expected_out.detach()] + [x.grad for x in full]
                for algo in ("ring", "ulysses"):
                    local = [zigzag_shard(x, cu, group_rank, degree).float().requires_grad_() for x in (q, k, v)]
                    out = fcp_attention(*local, cu, group=pool.get(ranks), algo=algo, causal=causal,
                                        kernel="npu_fusion")
                    out.backward(zigzag_shard(dout, cu, group_rank, degree).float())
                    for name, got, want in zip(("out", "dq", "dk", "dv"), [out] + [x.grad for x in local], expected):
                        torch.testing.assert_close(
                            got.double(), zigzag_shard(want, cu, group_rank, degree), rtol=1e-4, atol=1e-5,
                            msg=lambda m: f"{name} degree={degree} {algo} causal={causal} kv={kv_heads}: {m}")
                    checked.append((degree, algo, causal, kv_heads))
    return {"checked": checked, "calls": dict(CALLS)}


HYBRID_WORLD_SIZE = 6
# Per round: (group size, Ulysses degree u) of each group; u = None: a ring group beside the hybrid one.
HYBRID_ROUNDS = (((4, 2), (2, None)), ((6, 2),), ((6, 3),))


def _hybrid_world(rank: int, world_size: int, tnd_statistics: bool) -> dict:
    sys.path.insert(0, str(CPU_ASCEND))
    sys.path.insert(0, str(UT))
    import torch_npu  # noqa: F401  (the CPU surface)
    from attention_reference import dense_case, unsharded_bf16, within_bf16_of_one_process
    from torch_npu._trace import CALLS

    from mindspeed_mm.core.fcp.parallel import CommGroupPool, HybridGroup, fcp_attention, zigzag_shard
    from mindspeed_mm.core.fcp.parallel.kernels import get_kernel
    from mindspeed_mm.core.fcp.solver.hybrid_split import HybridSplit, communicator_rank_sets

    get_kernel("npu_fusion").kernel.tnd_statistics = tnd_statistics
    cu = [0, *torch.tensor(LENGTHS).cumsum(0).tolist()]
    pool, checked = CommGroupPool(), []
    for groups in HYBRID_ROUNDS:
        layout, start = [], 0
        for size, u in groups:
            layout.append((list(range(start, start + size)), u))
            start += size
        pool.prewarm([rank_set for ranks, u in layout for rank_set in communicator_rank_sets(
            ranks, None if u is None else HybridSplit(u, len(ranks) // u))])
        ranks, u = next((ranks, u) for ranks, u in layout if rank in ranks)
        if u is None:
            continue
        degree, group_rank = len(ranks), ranks.index(rank)
        group = HybridGroup.from_pool(pool, ranks, u, rank)
        for kv_heads in (HEADS, 2):
            (q, k, v), dout, expected = dense_case(cu, HEADS, kv_heads, HEAD_DIM, causal=True,
                                                   seed=degree * 10 + u + kv_heads)
            one_process = unsharded_bf16(q, k, v, dout, cu, True, kernel="npu_fusion")
            for dtype in (torch.float32, torch.bfloat16):
                local = [zigzag_shard(x, cu, group_rank, degree).to(dtype).requires_grad_() for x in (q, k, v)]
                out = fcp_attention(*local, cu, group=group, algo="hybrid", causal=True, kernel="npu_fusion")
                out.backward(zigzag_shard(dout, cu, group_rank, degree).to(dtype))
                for index, (name, got) in enumerate(zip(("out", "dq", "dk", "dv"), [out] + [x.grad for x in local])):
                    want = zigzag_shard(expected[index], cu, group_rank, degree)
                    what = f"{name} {u} x {degree // u} {dtype} kv={kv_heads}"
                    if dtype == torch.float32:
                        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{what}: {m}")
                    else:
                        within_bf16_of_one_process(got, want, zigzag_shard(one_process[index], cu, group_rank, degree),
                                                   what)
                checked.append((u, degree // u, dtype == torch.bfloat16, kv_heads < HEADS))
    return {"checked": checked, "calls": dict(CALLS)}


def test_hybrid_groups_through_the_npu_adapter_match_the_unsharded_reference() -> None:
    from mindspeed_mm.core.fcp.profiler.world import run_world

    per_rank = run_world(_hybrid_world, HYBRID_WORLD_SIZE, False, timeout_s=300)
    checked = {case for rank in per_rank for case in rank["checked"]}
    assert checked == {(u, r, bf16, gqa) for u, r in ((2, 2), (2, 3), (3, 2)) for bf16 in (False, True)
                       for gqa in (False, True)}
    for rank in per_rank:
        assert rank["calls"].get(f"npu_fusion_attention:caller:{ADAPTER}", 0) > 0, rank["calls"]
        assert rank["calls"].get(f"npu_fusion_attention_grad:caller:{ADAPTER}", 0) > 0, rank["calls"]


@pytest.mark.parametrize("tnd_statistics", [True, False], ids=["softmax_layout_TND", "NTD_converted"])
def test_ring_and_ulysses_through_the_npu_adapter_match_the_unsharded_reference(tnd_statistics: bool) -> None:
    from mindspeed_mm.core.fcp.profiler.world import run_world

    per_rank = run_world(_world, WORLD_SIZE, tnd_statistics, timeout_s=240)
    degrees = {case[0] for rank in per_rank for case in rank["checked"]}
    assert degrees == {1, 2, 3}
    for rank in per_rank:
        assert rank["calls"].get(f"npu_fusion_attention:caller:{ADAPTER}", 0) > 0, rank["calls"]
        assert rank["calls"].get(f"npu_fusion_attention_grad:caller:{ADAPTER}", 0) > 0, rank["calls"]
