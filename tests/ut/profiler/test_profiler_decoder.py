"""The profiler's decoder, run by a CP group (ring / Ulysses over gloo), equals the unsharded decoder.

The validation times exactly this code, so it must compute the real thing: the group's summed loss
and its all-reduced parameter gradients match a single process running the whole packed batch.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from distributed_utils import run_distributed
from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.profiler.probe_batch import cu_seqlens_of, shard_inputs
from mindspeed_mm.core.fcp.profiler.profile_config import model_shape
from mindspeed_mm.core.fcp.profiler.decoder import Decoder, fcp_core, skip_core

LENGTHS = [37, 5, 64, 3, 20]
SHAPE = model_shape("tiny")


def _reference() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model = Decoder(SHAPE, "fp32", seed=3).double()
    inputs = shard_inputs(LENGTHS, SHAPE.vocab, 0, 1, seed=5)
    loss = model(inputs, fcp_core(cu_seqlens_of(LENGTHS), None, "ring", causal=True))
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def _group_run(rank: int, world_size: int, algo: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    pool = CommGroupPool()
    pool.prewarm([tuple(range(world_size))])
    group = pool.get(tuple(range(world_size)))
    model = Decoder(SHAPE, "fp32", seed=3).double()
    inputs = shard_inputs(LENGTHS, SHAPE.vocab, rank, world_size, seed=5)
    loss = model(inputs, fcp_core(cu_seqlens_of(LENGTHS), group, algo, causal=True))
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total, group=group)
    grads = {}
    for name, p in model.named_parameters():
        grad = p.grad.clone()
        dist.all_reduce(grad, group=group)
        grads[name] = grad
    return total, grads


@pytest.mark.parametrize("algo", ["ring", "ulysses"])
def test_group_execution_matches_the_single_process_decoder(algo: str) -> None:
    ref_loss, ref_grads = _reference()
    results = run_distributed(_group_run, 2, algo, timeout_s=300)
    for loss, grads in results:
        torch.testing.assert_close(loss, ref_loss)
        assert grads.keys() == ref_grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, ref_grads[name], msg=lambda m, n=name: f"{n}: {m}")


def test_skip_core_runs_everything_but_attention() -> None:
    model = Decoder(SHAPE, "fp32", seed=0)
    inputs = shard_inputs([16, 8], SHAPE.vocab, 0, 1)
    model(inputs, skip_core).backward()
    qkv = model.layers[0].qkv.weight.grad
    assert qkv is not None and torch.count_nonzero(qkv) > 0
    assert model.head.weight.grad is not None


def test_shard_inputs_reject_bad_lengths() -> None:
    with pytest.raises(ValueError, match=r"document 1: length must be a positive int, got 0"):
        shard_inputs([4, 0], SHAPE.vocab, 0, 1)
    with pytest.raises(ValueError, match="at least one document"):
        cu_seqlens_of([])
