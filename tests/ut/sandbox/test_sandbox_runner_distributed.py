"""Round runner on 4 gloo ranks: a hand-made plan with groups of 3, 2 and 1 (ring and Ulysses) and ranks
that sit a round out gives the single-process reference's loss and gradients; token accounting and plan agreement checks; a group with
fewer tokens than ranks (padded so no rank is left empty) still gives the reference's gradients."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from distributed_utils import run_distributed, whole_world_runtime
from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.sandbox.run_config import parse_run_config
from mindspeed_mm.core.fcp.sandbox.text_dataset import Sample, build_dataset
from mindspeed_mm.core.fcp.sandbox.grad_sync import allreduce_gradients
from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.sandbox.gpt_model import build_gpt_model
from mindspeed_mm.core.fcp.runtime.plan_check import PlanMismatchError, check_plan_agreement, check_plan_executable
from mindspeed_mm.core.fcp.sandbox.reference_training import (
    ReferenceCoreAttention, backward_batch, text_sample_token_losses,
)
from mindspeed_mm.core.fcp.sandbox.round_batch import build_shard_batch
from mindspeed_mm.core.fcp.sandbox.round_runner import RoundRunner
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.solver import GroupPlan, InvalidPlanError, Plan, RoundPlan

WORLD_SIZE = 4
CONFIG = {
    "gpt_args": {
        "global_batch_size": 6,
        "train_iters": 1,
        "seq_length": 64,
        "num_layers": 2,
        "hidden_size": 32,
        "ffn_hidden_size": 48,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "vocab_size": 64,
        "seed": 5,
        "fcp_preset": "cpu-tiny",
    },
    "data": {"dataset": "internvid", "length_scale": 50, "min_length": 5, "seed": 1},
}
# (ranks, algo, batch positions) per group, per round; every rank is in one group per round, and
# ranks 0 and 1 sit the last round out.
LAYOUT = (
    (((0, 1, 2), "ring", (0, 1)), ((3,), "ring", (2,))),
    (((0, 1), "ulysses", (3,)), ((2, 3), "ring", (4,))),
    (((0,), "idle", ()), ((1,), "idle", ()), ((2, 3), "ulysses", (5,))),
)


def _plan() -> Plan:
    rounds = tuple(
        RoundPlan(
            groups=tuple(
                GroupPlan(ranks=ranks, degree=len(ranks), algo=algo, samples=samples,
                          predicted_ms=0.0 if algo == "idle" else 1.0)
                for ranks, algo, samples in groups
            ),
            predicted_ms=1.0,
        )
        for groups in LAYOUT
    )
    return Plan(rounds=rounds, predicted_ms=3.0, lower_bound_ms=1.0, solver_ms=0.0, num_ranks=WORLD_SIZE)


TINY = Sample(index=0, tokens=torch.tensor([3, 9, 4]), labels=torch.tensor([9, 4, 7]), loss_mask=torch.ones(3))


def _tiny_group_step(model: torch.nn.Module, groups: CommGroupPool, rank: int) -> dict:
    """A 3-token sample on a group of all 4 ranks, with each algo: loss and summed gradients."""
    groups.prewarm([(0, 1, 2, 3)])
    out = {}
    for algo in ("ring", "ulysses"):
        model.zero_grad(set_to_none=True)
        batch = build_shard_batch([TINY], rank_in_group=rank, degree=4, group=groups.get((0, 1, 2, 3)), algo=algo)
        losses = model(
            batch.tokens, batch.position_ids, None, labels=batch.labels, packed_seq_params=batch.packed_seq_params
        ).reshape(-1)
        loss = (losses * batch.loss_mask).sum()
        loss.backward()
        params = list(model.parameters())
        allreduce_gradients(params)
        total = loss.detach().clone()
        torch.distributed.all_reduce(total)
        out[algo] = (float(total), batch.tokens.shape[1], {n: p.grad.clone() for n, p in model.named_parameters()})
    return out


def _worker(rank: int, world_size: int) -> dict:
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(1, 1)
    config = parse_run_config(CONFIG)
    dataset = build_dataset(config)
    sampler = PlanAwareSampler(dataset, global_batch_size=6, num_steps=1)
    model = build_gpt_model(config.model, config.training.seed)
    plan = _plan()
    runner = RoundRunner(model, sampler, whole_world_runtime(rank, world_size), torch.device("cpu"))
    output = runner.run_step(plan, step=0)
    params = list(model.parameters())
    allreduce_gradients(params)
    loss_sum = output.loss_sum.clone()
    torch.distributed.all_reduce(loss_sum)
    result = {
        "loss": float(loss_sum) / sampler.batch_loss_tokens(0),
        "grads": {name: p.grad.clone() for name, p in model.named_parameters()},
        "tokens": output.accounting.tokens,
        "loss_tokens": output.accounting.loss_tokens,
        "groups": output.accounting.groups,
        "rounds": [(r.ranks, r.algo, r.sample_indices) for r in output.rounds],
    }
    # A rank with a different plan: every rank must raise, naming the step.
    other = dataclasses.replace(plan, predicted_ms=4.0) if rank == 2 else plan
    try:
        check_plan_agreement(other, step=6)
        result["mismatch"] = None
    except PlanMismatchError as err:
        result["mismatch"] = str(err)
    result["tiny"] = _tiny_group_step(model, CommGroupPool(), rank)
    if rank == 0:
        reference = build_gpt_model(config.model, config.training.seed, core_attention=ReferenceCoreAttention)
        result["reference_loss"] = backward_batch(
            lambda index: (text_sample_token_losses(reference, dataset[index]) * dataset[index].loss_mask).sum(),
            sampler.batch_indices(0), sampler.batch_loss_tokens(0))
        result["reference_grads"] = {name: p.grad.clone() for name, p in reference.named_parameters()}
        reference.zero_grad(set_to_none=True)
        tiny_losses = text_sample_token_losses(reference, TINY)
        tiny_losses.sum().backward()
        result["tiny_reference"] = (
            float(tiny_losses.sum()),
            {name: p.grad.clone() for name, p in reference.named_parameters()},
        )
        result["lengths"] = dataset.lengths.tolist()
        result["loss_token_counts"] = dataset.loss_tokens.tolist()
    parallel_state.destroy_model_parallel()
    return result


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_distributed(_worker, WORLD_SIZE, timeout_s=240.0)


def test_plan_execution_matches_single_process_reference(results: list[dict]) -> None:
    reference = results[0]
    for rank, result in enumerate(results):
        assert result["loss"] == pytest.approx(reference["reference_loss"], rel=1e-5)
        for name, grad in result["grads"].items():
            torch.testing.assert_close(grad, reference["reference_grads"][name], msg=f"rank {rank} {name}")
        assert result["mismatch"] is not None and result["mismatch"].startswith("step 7: ranks hold different plans")
        assert "ranks [2] differ" in result["mismatch"]
    # Every sample is trained exactly once: tokens summed over the ranks' actual shards.
    tokens = sum(r["tokens"] for r in results)
    loss_tokens = sum(r["loss_tokens"] for r in results)
    groups = sum(r["groups"] for r in results)
    assert tokens.tolist() == reference["lengths"]
    assert loss_tokens.tolist() == reference["loss_token_counts"]
    assert groups.tolist() == [1.0] * 6
    assert results[3]["rounds"] == [((3,), "local", (2,)), ((2, 3), "ring", (4,)), ((2, 3), "ulysses", (5,))]
    assert results[1]["rounds"] == [((0, 1, 2), "ring", (0, 1)), ((0, 1), "ulysses", (3,)), ((1,), "idle", ())]


def test_group_with_fewer_tokens_than_ranks_matches_reference(results: list[dict]) -> None:
    expected_loss, expected_grads = results[0]["tiny_reference"]
    for algo in ("ring", "ulysses"):
        # 3 tokens on 4 ranks: the padding document gives every rank tokens to hold
        assert all(r["tiny"][algo][1] > 0 for r in results)
        for rank, result in enumerate(results):
            loss, _, grads = result["tiny"][algo]
            assert loss == pytest.approx(expected_loss, rel=1e-5)
            for name, grad in grads.items():
                torch.testing.assert_close(grad, expected_grads[name], msg=f"{algo} rank {rank} {name}")


def test_plan_missing_a_rank_is_rejected_before_running() -> None:
    cost = CostModel.from_preset("cpu-tiny")
    plan = _plan()
    short_round = RoundPlan(groups=plan.rounds[1].groups[:1], predicted_ms=1.0)
    broken = dataclasses.replace(plan, rounds=(plan.rounds[0], short_round))
    lengths = [20, 20, 20, 20, 20, 20]
    check_plan_executable(plan, step=3, num_ranks=WORLD_SIZE, lengths=lengths, cost=cost)   # idle ranks run
    with pytest.raises(InvalidPlanError, match="step 4: .*round 1"):
        check_plan_executable(broken, step=3, num_ranks=WORLD_SIZE, lengths=lengths, cost=cost)
    with pytest.raises(InvalidPlanError, match="step 1: plan covers 4 ranks but training runs on 5"):
        check_plan_executable(plan, step=0, num_ranks=5, lengths=lengths, cost=cost)
