"""Synthetic dataset and plan-aware sampler: metadata without loading, deterministic contents, plan mapping."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mindspeed_mm.core.fcp.sandbox.run_config import DataConfig
from mindspeed_mm.core.fcp.sandbox.text_dataset import LENGTH_BLOCK, SyntheticDataset, block_seed
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRankLayout, rounds_of_rank
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.simulate.workloads import generate, scale_lengths
from mindspeed_mm.core.fcp.solver import GroupPlan, InvalidPlanError, Plan, RoundPlan

CONFIG = DataConfig(dataset="openvid", length_scale=64.0, min_length=8, seed=3, loss_free_prefix=0.5)


def _dataset(num_samples: int = 24, seq_length: int = 96) -> SyntheticDataset:
    return SyntheticDataset(CONFIG, num_samples=num_samples, seq_length=seq_length, vocab_size=50, token_seed=11)


def test_lengths_follow_the_scaled_generator_and_are_truncated() -> None:
    dataset = _dataset()
    expected = np.minimum(scale_lengths(generate("openvid", LENGTH_BLOCK, block_seed(3, 0)), 64.0, 8), 96)
    np.testing.assert_array_equal(dataset.lengths, expected[:24])
    assert dataset.lengths.max() == 96 and dataset.lengths.min() >= 8
    assert not dataset.lengths.flags.writeable


def test_a_sample_does_not_depend_on_the_dataset_size() -> None:
    small, large = _dataset(24), _dataset(LENGTH_BLOCK + 50)
    np.testing.assert_array_equal(small.lengths, large.lengths[:24])
    np.testing.assert_array_equal(small.loss_tokens, large.loss_tokens[:24])
    torch.testing.assert_close(small[7].tokens, large[7].tokens, rtol=0, atol=0)
    assert not np.array_equal(large.lengths[:50], large.lengths[LENGTH_BLOCK:])


def test_samples_are_deterministic_and_consistent_with_metadata() -> None:
    first, second = _dataset(), _dataset()
    for index in (0, 5, 23):
        a, b = first[index], second[index]
        torch.testing.assert_close(a.tokens, b.tokens, rtol=0, atol=0)
        assert a.length == first.lengths[index]
        # labels are the next tokens of the same stream
        torch.testing.assert_close(a.tokens[1:], a.labels[:-1], rtol=0, atol=0)
        assert int(a.loss_mask.sum()) == first.loss_tokens[index] >= 1
        # the loss-free part is a prefix
        ones = torch.nonzero(a.loss_mask).flatten()
        assert ones.tolist() == list(range(int(ones[0]), a.length))
        assert int(a.tokens.max()) < 50
    assert not torch.equal(first[0].tokens[:8], first[1].tokens[:8])


def test_out_of_range_index_is_rejected() -> None:
    with pytest.raises(IndexError, match="sample index 24 is outside 0..23"):
        _dataset()[24]


def _plan(groups_per_round: list[list[tuple[tuple[int, ...], tuple[int, ...]]]], num_ranks: int) -> Plan:
    rounds = tuple(
        RoundPlan(
            groups=tuple(
                GroupPlan(ranks=r, degree=len(r), algo="ring", samples=s, predicted_ms=1.0) for r, s in groups
            ),
            predicted_ms=1.0,
        )
        for groups in groups_per_round
    )
    return Plan(rounds=rounds, predicted_ms=float(len(rounds)), lower_bound_ms=1.0, solver_ms=0.0, num_ranks=num_ranks)


def test_sampler_maps_plan_positions_to_the_step_batch() -> None:
    dataset = _dataset()
    sampler = PlanAwareSampler(dataset, global_batch_size=4, num_steps=6)
    assert list(sampler.batch_indices(2)) == [8, 9, 10, 11]
    np.testing.assert_array_equal(sampler.batch_lengths(2), dataset.lengths[8:12])
    assert sampler.batch_loss_tokens(2) == int(dataset.loss_tokens[8:12].sum())
    plan = _plan([[((0, 1), (0, 2)), ((2,), (3,))], [((0,), (1,)), ((1, 2), ())]], num_ranks=3)
    rounds = rounds_of_rank(plan, FCPRankLayout(planes=((0, 1, 2),), rank=1))
    indices = [sampler.round_sample_indices(2, r) for r in rounds]
    assert indices == [(8, 10), ()]
    assert [r.rank_in_group for r in rounds] == [1, 0]
    assert [s.index for s in sampler.load(indices[0])] == [8, 10]


def test_sampler_rejects_bad_plans_and_sizes() -> None:
    dataset = _dataset()
    with pytest.raises(ValueError, match="fewer than 7 steps x 4 per batch"):
        PlanAwareSampler(dataset, global_batch_size=4, num_steps=7)
    sampler = PlanAwareSampler(dataset, global_batch_size=4, num_steps=6)
    outside = _plan([[((0, 1), (0, 4))]], num_ranks=2)
    first_round = rounds_of_rank(outside, FCPRankLayout(planes=((0, 1),), rank=0))[0]
    with pytest.raises(InvalidPlanError, match="step 1, round 0: sample 4 is outside the global batch of 4"):
        sampler.round_sample_indices(0, first_round)
    missing = _plan([[((0,), (0,)), ((1,), (1,))], [((0,), (2, 3))]], num_ranks=2)
    with pytest.raises(InvalidPlanError, match="round 1 has no group holding rank 1"):
        rounds_of_rank(missing, FCPRankLayout(planes=((0, 1),), rank=1))
