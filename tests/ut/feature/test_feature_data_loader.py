"""FCP's MindSpeed-MM data path without the upstream stack: global batch order, plan sharing, packing, errors."""
from __future__ import annotations

import pytest
import torch

from mindspeed_mm.core.fcp.runtime.look_ahead import PlannedStep

from plan_fakes import make_plan
from mindspeed_mm.core.fcp.solver.errors import InfeasibleSampleError
from mindspeed_mm.core.fcp.runtime.round_loader import FCPRoundLoader
from mindspeed_mm.core.fcp.runtime.run_steps import RunSteps
from mindspeed_mm.core.fcp.runtime.step_plans import (
    FCPDataError, GlobalBatchOrder, StepPlans, check_budget_holds_the_longest,
)
from mindspeed_mm.features_manager.fcp.data_loader import (
    PackedGroupCollator,
    check_collated_lengths,
    dataset_token_lengths,
    prepare_sampler_dataloader_wrapper,
    register_training_plans,
)
from mindspeed_mm.features_manager.fcp.qwen3vl.adapter import QWEN3_VL
from mindspeed_mm.features_manager.fcp.runtime import FCPRankLayout, FCPRuntime

STEPS = RunSteps(0, 100)
MEDIA_KEYS = QWEN3_VL.media_keys


def upstream_random_batch_order(num_samples: int, consumed: int) -> list[int]:
    """What MindSpeed-MM's BaseRandomBatchSampler yields on one rank with micro batch 1, from `consumed`: one epoch."""
    epoch, offset = divmod(consumed, num_samples)
    generator = torch.Generator()
    generator.manual_seed(epoch)
    return torch.randperm(num_samples, generator=generator).tolist()[offset:]


def test_global_batches_follow_the_upstream_random_order_across_epochs() -> None:
    order = GlobalBatchOrder(num_samples=16, global_batch_size=8, shuffle=True)
    for step in range(5):
        consumed = step * 8
        assert order.indices(step) == upstream_random_batch_order(16, consumed)[:8]
    assert GlobalBatchOrder(16, 8, shuffle=False).indices(3) == list(range(8, 16))


def test_a_partial_last_global_batch_is_dropped_from_each_epoch() -> None:
    order = GlobalBatchOrder(num_samples=10, global_batch_size=4, shuffle=False)
    assert [order.indices(s) for s in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]


def test_a_dataset_smaller_than_one_global_batch_is_refused() -> None:
    with pytest.raises(FCPDataError, match="3 samples, fewer than one global batch"):
        GlobalBatchOrder(num_samples=3, global_batch_size=8, shuffle=True)


class _Source:
    """A plan source that plans batch after batch with one group of all ranks per sample (in order)."""

    def __init__(self, batch_lengths, batch_patches=None, num_ranks: int = 2) -> None:
        self.batch_lengths = batch_lengths
        self.batch_patches = batch_patches
        self.num_ranks = num_ranks
        self.calls = 0
        self.wants_measurements = False
        self.horizon = 10**9
        """Steps up to this one can be planned (as a recalibrating source allows once times are recorded)."""
        self.asked: list[int] = []

    def can_plan(self, step: int) -> bool:
        return step <= self.horizon

    def plan(self, step: int) -> PlannedStep:
        assert step <= self.horizon, f"step {step} was asked before its plan could be made"
        self.asked.append(step)
        lengths = self.batch_lengths(step)
        self.calls += 1
        everyone = tuple(range(self.num_ranks))
        return PlannedStep(step, make_plan([[(everyone, "ring", (i,))] for i in range(len(lengths))],
                                           self.num_ranks), 0.0)

    def close(self) -> None:
        pass


def test_sampler_and_runtime_read_the_same_plans_each_planned_once() -> None:
    order = GlobalBatchOrder(num_samples=8, global_batch_size=4, shuffle=False)
    sources = []
    plans = StepPlans(order, list(range(10, 18)), lambda lengths, patches: sources.append(_Source(lengths, patches)) or sources[-1], STEPS)
    loader = FCPRoundLoader(plans, FCPRankLayout(planes=((0, 1),), rank=1), collate=lambda indices, degree: list(indices))
    batches = loader.rounds()
    assert [next(batches)[1] for _ in range(6)] == [[0], [1], [2], [3], [4], [5]]  # the sampler runs ahead
    first = plans.plan(0, "runtime")
    assert first is plans.plan(0, "runtime")
    assert plans.plan(1, "runtime").num_rounds == 4
    assert sources[0].calls == 2
    with pytest.raises(RuntimeError, match="asked for step 1 after step 2"):
        plans.plan(0, "runtime")


def test_the_plans_of_a_resumed_run_start_at_its_first_step() -> None:
    order = GlobalBatchOrder(num_samples=8, global_batch_size=4, shuffle=False)
    lengths_seen = []

    def factory(batch_lengths, batch_patches):
        lengths_seen.append(batch_lengths(1))
        assert batch_patches is None   # no patches given: the vision tower is not priced
        return _Source(batch_lengths)

    plans = StepPlans(order, list(range(100, 108)), factory, RunSteps(1, 10))
    assert lengths_seen == [[104, 105, 106, 107]]
    assert plans.samples(1, [0, 3]) == [4, 7]


def test_the_plans_see_each_batchs_vision_patches() -> None:
    order = GlobalBatchOrder(num_samples=8, global_batch_size=4, shuffle=False)
    sources = []
    StepPlans(order, list(range(8)), lambda lengths, patches: sources.append(_Source(lengths, patches)) or sources[-1],
              STEPS, patches=[0, 16, 0, 64, 4, 0, 0, 256])
    assert sources[0].batch_patches(0) == [0, 16, 0, 64] and sources[0].batch_patches(1) == [4, 0, 0, 256]
    with pytest.raises(FCPDataError, match="3 vision patch counts for 8 samples"):
        StepPlans(order, list(range(8)), _Source, STEPS, patches=[1, 2, 3])


def test_a_sample_too_long_for_every_group_is_named_by_its_dataset_index() -> None:
    order = GlobalBatchOrder(num_samples=8, global_batch_size=4, shuffle=False)

    class TooLong(_Source):
        def plan(self, step: int) -> PlannedStep:
            raise InfeasibleSampleError(index=2, length=900, capacity_tokens=100, max_degree=4)

    plans = StepPlans(order, [1] * 8, TooLong, RunSteps(1, 10))
    with pytest.raises(FCPDataError, match=r"training sample 6 of the dataset \(900 tokens.*needs 9 ranks.*at most 4"):
        plans.plan(1, "runtime")
    # With the vision tower priced, the message also names the sample's patches.
    priced = StepPlans(order, [1] * 8, TooLong, RunSteps(1, 10), patches=[0, 0, 0, 0, 0, 0, 3600, 0])
    with pytest.raises(FCPDataError, match=r"training sample 6 of the dataset \(900 tokens after vision-token "
                                           r"expansion, 3600 vision patches\) does not fit"):
        priced.plan(1, "runtime")


def test_a_budget_that_cannot_hold_the_longest_sample_stops_at_start_naming_the_option() -> None:
    from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions

    # 64 ranks, groups of at most 12: on the slot grid the budget's powers of two hold any batch up to 8 ranks.
    planner = FCPOptions(preset="cpu-tiny", max_degree=12).batch_planner(num_ranks=64)
    capacity = planner.cost.capacity_tokens
    check_budget_holds_the_longest([capacity] * 5 + [8 * capacity], planner)
    with pytest.raises(FCPDataError, match=r"training sample 3 of the dataset \(\d+ tokens\) needs a group of 10 "
                                           r"ranks .* fcp_communicator_budget=10 .* at most 8 ranks: raise "
                                           r"fcp_communicator_budget to at least \d+, or set fcp_max_degree to a "
                                           r"power of two at least 10"):
        check_budget_holds_the_longest([capacity] * 3 + [10 * capacity - 1, capacity], planner)
    wider = FCPOptions(preset="cpu-tiny", max_degree=16).batch_planner(num_ranks=64)
    check_budget_holds_the_longest([10 * capacity - 1], wider)


def test_packing_concatenates_sequences_and_media_and_strips_trailing_padding() -> None:
    def collate(samples):
        (sample,) = samples
        n = sample["n"]
        batch = {"input_ids": torch.arange(n + 2).unsqueeze(0), "labels": torch.full((1, n + 2), -100),
                 "attention_mask": torch.tensor([[1] * n + [0, 0]]), "video_metadata": [f"meta{n}"]}
        if sample["image"]:
            batch["pixel_values"] = torch.ones(4 * n, 3)
            batch["image_grid_thw"] = torch.tensor([[1, 2, 2 * n]])
        return batch

    packed = PackedGroupCollator(collate, [3, 5], MEDIA_KEYS, 0)([{"n": 3, "image": True}, {"n": 5, "image": False}], 2)
    assert packed["input_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]
    assert packed["labels"].shape == (1, 8)
    assert packed["seqlens"].tolist() == [3, 5] and packed["seqlens"].dtype == torch.int32
    assert packed["pixel_values"].shape == (12, 3) and packed["image_grid_thw"].tolist() == [[1, 2, 6]]
    assert packed["video_metadata"] == ["meta3", "meta5"]
    assert "attention_mask" not in packed
    check_collated_lengths(packed, [7, 9], {7: 3, 9: 5})
    with pytest.raises(FCPDataError, match="training sample 9: planned with 6 tokens but collated to 5"):
        check_collated_lengths(packed, [7, 9], {7: 3, 9: 6})


def test_a_group_wider_than_its_samples_gets_a_loss_free_padding_document() -> None:
    def collate(samples):
        return {"input_ids": torch.tensor([[5, 6, 7]]), "labels": torch.tensor([[5, 6, 7]])}

    packer = PackedGroupCollator(collate, [3, 3], MEDIA_KEYS, 1)
    packed = packer([{}, {}], 4)  # the longest sample (3 tokens) leaves the middle ranks of 4 without tokens
    assert packed["seqlens"].tolist() == [3, 3, 8]
    assert packed["input_ids"][0, 6:].tolist() == [1] * 8 and packed["labels"][0, 6:].tolist() == [-100] * 8
    check_collated_lengths(packed, [0, 1], [3, 3])
    assert packer([{}, {}], 3)["seqlens"].tolist() == [3, 3]


def test_packing_refuses_padding_inside_a_sample_and_keys_it_cannot_pack() -> None:
    inner_gap = PackedGroupCollator(
        lambda s: {"input_ids": torch.zeros(1, 3), "attention_mask": torch.tensor([[1, 0, 1]])}, [3], MEDIA_KEYS, 0)
    with pytest.raises(FCPDataError, match="padding before the sample's end"):
        inner_gap([{}], 1)
    unknown = PackedGroupCollator(lambda s: {"input_ids": torch.zeros(1, 3), "token_type_ids": torch.zeros(1, 3)}, [3],
                                  MEDIA_KEYS, 0)
    with pytest.raises(FCPDataError, match="cannot pack the collated key 'token_type_ids'"):
        unknown([{}], 1)


def test_fcp_refuses_another_sampler_naming_the_yaml_key() -> None:
    def prepare(dataset, batch_size=1, sampler_type="stateful_distributed_sampler", collate_param=None):
        raise AssertionError("upstream's builder must not run under fcp_cp_algo")

    wrapped = prepare_sampler_dataloader_wrapper(prepare)
    with pytest.raises(FCPDataError, match=r"set data\.dataloader_param\.sampler_type: FCPBatchSampler "
                                           r"\(got 'BaseRandomBatchSampler'\)"):
        wrapped([], sampler_type="BaseRandomBatchSampler")


def test_a_dataset_without_token_lengths_is_refused_naming_what_is_needed() -> None:
    with pytest.raises(FCPDataError, match=r"column 'input_ids'.*preprocess_on_fly"):
        dataset_token_lengths([{"text": "a"}], QWEN3_VL)


def test_only_the_training_loader_supplies_plans() -> None:
    order = GlobalBatchOrder(num_samples=8, global_batch_size=4, shuffle=False)
    runtime = FCPRuntime()
    register_training_plans(runtime, StepPlans(order, [1] * 8, _Source, RunSteps(2, 5)))
    assert runtime.step == 2
    with pytest.raises(FCPDataError, match="a second FCPBatchSampler data loader .*val_dataset or val_rate"):
        register_training_plans(runtime, StepPlans(order, [1] * 8, _Source, STEPS))


def _collate_round(indices: list[int], degree: int) -> dict:
    """A stand-in round batch: the indices as a tensor, and the worker's process id."""
    import os

    return {"indices": torch.tensor(indices), "pid": os.getpid()}


def _failing_collate(indices: list[int], degree: int) -> dict:
    if indices == [13]:
        raise KeyError("sample 13 has no input_ids")
    return _collate_round(indices, degree)


@pytest.mark.parametrize("num_workers, prefetch_factor", [(2, 2), (3, 4)])
def test_workers_collate_ahead_only_steps_whose_plans_can_be_made_and_give_the_same_batches(
        num_workers: int, prefetch_factor: int) -> None:
    order = GlobalBatchOrder(num_samples=24, global_batch_size=4, shuffle=True)
    layout = FCPRankLayout(planes=((0, 1),), rank=0)

    def batches(workers: int, factor: int | None) -> tuple[list[list[int]], set[int], _Source]:
        sources: list[_Source] = []
        plans = StepPlans(order, list(range(24)), lambda lengths, patches: sources.append(_Source(lengths, patches)) or sources[-1], STEPS)
        sources[0].horizon = 1  # only steps 0 and 1 can be planned until "step 0's times are recorded"
        loader = iter(FCPRoundLoader(plans, layout, _collate_round, num_workers=workers, prefetch_factor=factor))
        got, pids = [], set()
        for step in range(5):
            for _ in range(4):  # four rounds per step, one sample each
                batch = next(loader)
                got.append(batch["indices"].tolist())
                pids.add(batch["pid"])
            sources[0].horizon = step + 2  # the runtime recorded this step: two steps later can be planned
        loader.close()
        return got, pids, sources[0]

    serial, serial_pids, _ = batches(0, None)
    parallel, parallel_pids, source = batches(num_workers, prefetch_factor)
    assert parallel == serial
    assert len(parallel_pids) > 1 and not parallel_pids & serial_pids
    assert source.asked == sorted(set(source.asked))  # each step planned once, in order


def test_a_worker_error_names_the_round() -> None:
    order = GlobalBatchOrder(num_samples=16, global_batch_size=16, shuffle=False)
    plans = StepPlans(order, list(range(16)), _Source, STEPS)
    loader = iter(FCPRoundLoader(plans, FCPRankLayout(planes=((0, 1),), rank=0), _failing_collate, num_workers=2))
    with pytest.raises(FCPDataError, match="collating round 14 of this rank failed in a worker: KeyError"):
        for _ in range(16):
            next(loader)
    loader.close()
