"""FCP's ring and Ulysses attention through its `npu_fusion` adapter on the CPU `npu_fusion_attention`.

Three gloo processes run rounds whose groups have degrees 3, 1 and 2; every group attends its zigzag-sharded
packed batch (documents of 1 to 13 tokens, so some chunks are empty) with `fcp_attention(kernel="npu_fusion")`,
causal and full, MHA and GQA, against float64 dense attention of the unsharded batch, once with the softmax
statistics passed as TND (`softmax_layout`) and once converted from the kernel's default per-segment NTD order.
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


@pytest.mark.parametrize("tnd_statistics", [True, False], ids=["softmax_layout_TND", "NTD_converted"])
def test_ring_and_ulysses_through_the_npu_adapter_match_the_unsharded_reference(tnd_statistics: bool) -> None:
    from mindspeed_mm.core.fcp.profiler.world import run_world

    per_rank = run_world(_world, WORLD_SIZE, tnd_statistics, timeout_s=240)
    degrees = {case[0] for rank in per_rank for case in rank["checked"]}
    assert degrees == {1, 2, 3}
    for rank in per_rank:
        assert rank["calls"].get(f"npu_fusion_attention:caller:{ADAPTER}", 0) > 0, rank["calls"]
        assert rank["calls"].get(f"npu_fusion_attention_grad:caller:{ADAPTER}", 0) > 0, rank["calls"]
