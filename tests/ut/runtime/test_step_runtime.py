"""The FCP runtime behind the patches: rank layout, per-rank rounds, the batch shard function, the driver."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from distributed_utils import run_distributed
from plan_fakes import make_plan
from mindspeed_mm.core.fcp.parallel import zigzag_positions, zigzag_unshard
from mindspeed_mm.core.fcp.cost.communicator_memory import framework_communicators
from mindspeed_mm.core.fcp.solver import Plan
from mindspeed_mm.core.fcp.sandbox.packed_shard import shard_packed_batch
from mindspeed_mm.features_manager.fcp.megatron.schedule import fcp_forward_backward
from mindspeed_mm.features_manager.fcp.runtime import (
    FCPRankLayout,
    FCPRound,
    FCPRuntime,
    FCPRuntimeError,
    FCPRuntimeSettings,
    rounds_of_rank,
)


# Round 0: FCP ranks 0-2 form a ring group, rank 3 alone; round 1: two Ulysses pairs.
PLAN_4 = make_plan(
    [
        [((0, 1, 2), "ring", (0, 3)), ((3,), "ring", (1,))],
        [((0, 1), "ulysses", (2,)), ((2, 3), "ulysses", (4, 5))],
    ],
    num_ranks=4,
)


def test_layout_maps_fcp_ranks_to_global_ranks_in_each_plane() -> None:
    # TP = 2: planes are the even and the odd global ranks
    layout = FCPRankLayout(planes=((0, 2, 4, 6), (1, 3, 5, 7)), rank=5)
    assert (layout.plane, layout.fcp_rank, layout.num_fcp_ranks) == ((1, 3, 5, 7), 2, 4)
    assert layout.global_ranks((0, 1, 2)) == (1, 3, 5)
    assert layout.global_ranks((2, 3), plane=layout.planes[0]) == (4, 6)
    rounds = rounds_of_rank(PLAN_4, layout)
    assert rounds == [
        FCPRound(round_index=0, group_ranks=(1, 3, 5), rank_in_group=2, algo="ring", batch_positions=(0, 3)),
        FCPRound(round_index=1, group_ranks=(5, 7), rank_in_group=0, algo="ulysses", batch_positions=(4, 5)),
    ]


@pytest.mark.parametrize("planes, rank, message", [
    (((0, 1), (2,)), 0, "same number of ranks"),
    (((0, 1), (1, 2)), 0, "overlap"),
    (((0, 1),), 5, "no FCP plane"),
])
def test_bad_layouts_are_named(planes: tuple, rank: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FCPRankLayout(planes=planes, rank=rank)


def test_plan_for_another_plane_size_is_refused() -> None:
    with pytest.raises(FCPRuntimeError, match="covers 4 FCP ranks but each DP x CP plane holds 2"):
        rounds_of_rank(PLAN_4, FCPRankLayout(planes=((0, 1),), rank=0))


def test_the_runtime_allows_the_groups_its_planner_may_use() -> None:
    from mindspeed_mm.core.fcp.solver import SolverConfig

    settings = FCPRuntimeSettings()
    # Four ranks: every contiguous range fits the default budget of 6 (the plane's group is the range of 4).
    assert settings.catalogue(4).groups() == [(0, 1), (1, 2), (2, 3), (0, 1, 2), (1, 2, 3), (0, 1, 2, 3)]
    assert settings.catalogue(64) == SolverConfig(64).catalogue(settings.algos)
    assert FCPRuntimeSettings(plane_group=False, max_degree=8).catalogue(64) == \
        SolverConfig(64, max_degree=8, vision_over_round=False).catalogue(settings.algos)
    # A plan with a group off the slot grid (degree 3 from rank 1) is refused before its groups are created.
    runtime = FCPRuntime()
    runtime.layout = FCPRankLayout(planes=(tuple(range(8)),), rank=0)
    off_grid = make_plan([[((0,), "ring", (0,)), ((1, 2, 3), "ring", (1,)), ((4, 5, 6, 7), "ring", (2,))]],
                         num_ranks=8)
    with pytest.raises(FCPRuntimeError, match=r"step 1: round 0, group on ranks 1..3: not one of the run's groups "
                                              r"of degrees 2, 3, 4, 5, 6, 7, 8 on the aligned slot grid"):
        runtime.begin_step(off_grid)


def test_settings_name_bad_values() -> None:
    with pytest.raises(ValueError, match="group_pool must be one of lazy, prewarm"):
        FCPRuntimeSettings(group_pool="eager")


def test_round_bookkeeping_errors() -> None:
    runtime = FCPRuntime()
    with pytest.raises(FCPRuntimeError, match="initialize_model_parallel"):
        runtime.begin_step(PLAN_4)
    runtime.layout = FCPRankLayout(planes=((0,),), rank=0)
    with pytest.raises(FCPRuntimeError, match="no plan source"):
        runtime.begin_step()
    plan = make_plan([[((0,), "ring", (0,))], [((0,), "ring", (1,))]], num_ranks=1)
    runtime.set_plan_source(lambda step: plan, first_step=3)
    with pytest.raises(FCPRuntimeError, match="outside the FCP driver"):
        runtime.current_round
    assert runtime.step == 3
    assert len(runtime.begin_step()) == 2
    with pytest.raises(FCPRuntimeError, match="still running"):
        runtime.begin_step()
    runtime.next_round()
    with pytest.raises(FCPRuntimeError, match="ran 1 micro-batches but its plan has 2 rounds"):
        runtime.end_step()
    runtime.begin_step()
    runtime.next_round(), runtime.next_round()
    with pytest.raises(FCPRuntimeError, match="beyond them"):
        runtime.next_round()


def _packed_batch(lengths: list[int]) -> dict[str, Any]:
    total = sum(lengths)
    return {
        "tokens": torch.arange(total).unsqueeze(0),
        "labels": torch.arange(total).unsqueeze(0) + 1000,
        "loss_mask": torch.rand(1, total),
        "attention_mask": None,
        "cu_seqlens": torch.tensor([0, *lengths]).cumsum(0),
        "sample_name": "kept as is",
    }


@pytest.mark.parametrize("degree", [1, 2, 3, 5])
def test_shards_of_all_group_ranks_rebuild_the_batch(degree: int) -> None:
    lengths = [11, 4, 23, 10]
    batch = _packed_batch(lengths)
    cu = batch["cu_seqlens"]
    shards = []
    for rank in range(degree):
        shard = shard_packed_batch(batch, rank_in_group=rank, degree=degree, group=None, algo="ulysses")
        params = shard["packed_seq_params"]
        assert (params.degree, params.algo, params.group) == (degree, "ulysses", None)
        torch.testing.assert_close(params.cu_seqlens, cu)
        expected_positions = zigzag_positions(cu, rank, degree)
        torch.testing.assert_close(params.position_ids, expected_positions)
        torch.testing.assert_close(shard["position_ids"], expected_positions.unsqueeze(0))
        assert shard["attention_mask"] is None and shard["sample_name"] == "kept as is"
        assert "cu_seqlens" not in shard
        shards.append(shard)
    for key in ("tokens", "labels", "loss_mask"):
        rebuilt = zigzag_unshard([s[key][0] for s in shards], cu, degree)
        torch.testing.assert_close(rebuilt, batch[key][0], rtol=0, atol=0, msg=key)


def test_given_position_ids_are_sharded_and_used() -> None:
    batch = _packed_batch([6, 6])
    batch["position_ids"] = (torch.arange(12) * 7).unsqueeze(0)
    shard = shard_packed_batch(batch, rank_in_group=1, degree=2, group=None, algo="ring")
    torch.testing.assert_close(shard["packed_seq_params"].position_ids, shard["position_ids"].reshape(-1))
    torch.testing.assert_close(shard["tokens"] * 7, shard["position_ids"])


@pytest.mark.parametrize("change, message", [
    ({"cu_seqlens": None}, "cu_seqlens"),
    ({"cu_seqlens": torch.tensor([0, 5, 5, 12])}, "increase strictly"),
    ({"attention_mask": torch.ones(1, 1, 12, 12)}, "attention_mask"),
    ({"labels": torch.zeros(2, 12)}, r"batch\['labels'\] has shape \(2, 12\)"),
    ({"tokens": torch.zeros(1, 11)}, r"batch\['tokens'\]"),
])
def test_bad_batches_are_named(change: dict[str, Any], message: str) -> None:
    batch = _packed_batch([5, 7])
    for key, value in change.items():
        if value is None:
            del batch[key]
        else:
            batch[key] = value
    with pytest.raises(ValueError, match=message):
        shard_packed_batch(batch, rank_in_group=0, degree=2, group=None, algo="ring")


def test_a_batch_too_short_for_its_group_gets_a_loss_free_padding_document() -> None:
    # 3 tokens on 4 ranks would leave ranks without tokens: a 2 * 4-token document follows, with zero
    # loss weight, counting its own positions from 0; the real tokens shard as without it.
    batch = _packed_batch([3])
    batch["position_ids"] = torch.tensor([[5, 6, 7]])
    shards = [shard_packed_batch(batch, rank_in_group=r, degree=4, group=None, algo="ring") for r in range(4)]
    padded_cu = torch.tensor([0, 3, 11])
    torch.testing.assert_close(shards[0]["packed_seq_params"].cu_seqlens, padded_cu)
    assert all(s["tokens"].shape[1] > 0 for s in shards)
    loss_mask = zigzag_unshard([s["loss_mask"][0] for s in shards], padded_cu, 4)
    torch.testing.assert_close(loss_mask[:3], batch["loss_mask"][0])
    assert float(loss_mask[3:].abs().sum()) == 0.0
    positions = zigzag_unshard([s["position_ids"][0] for s in shards], padded_cu, 4)
    assert positions.tolist() == [5, 6, 7, *range(8)]
    tokens = zigzag_unshard([s["tokens"][0] for s in shards], padded_cu, 4)
    torch.testing.assert_close(tokens[:3], batch["tokens"][0])


def test_padding_without_loss_weights_is_refused_naming_the_key() -> None:
    batch = _packed_batch([3])
    del batch["loss_mask"]
    with pytest.raises(ValueError, match=r"3 tokens leave a rank of a group of degree 4 without tokens.*'loss_mask'"):
        shard_packed_batch(batch, rank_in_group=0, degree=4, group=None, algo="ring")


def test_driver_runs_one_micro_batch_per_round_and_recovers_from_errors() -> None:
    runtime = FCPRuntime()
    runtime.layout = FCPRankLayout(planes=((0,),), rank=0)
    plans = iter([
        make_plan([[((0,), "ring", (0,))], [((0,), "ring", (1, 2))], [((0,), "ring", (3,))]], num_ranks=1),
        make_plan([[((0,), "ring", (0, 1))]], num_ranks=1),
        make_plan([[((0,), "ring", (0,))]], num_ranks=1),
    ])
    runtime.set_plan_source(lambda step: next(plans))
    seen: list[tuple[int, ...]] = []

    def schedule(*, forward_step_func: Any, num_microbatches: int, **kwargs: Any) -> int:
        for _ in range(num_microbatches):
            forward_step_func(None, None)
        return num_microbatches

    def forward_step(data_iterator: Any, model: Any) -> None:
        seen.append(runtime.current_round.batch_positions)

    driver = fcp_forward_backward(schedule, runtime)
    assert driver(forward_step_func=forward_step, num_microbatches=8, data_iterator=None, model=None) == 3
    assert seen == [(0,), (1, 2), (3,)]
    assert driver(forward_step_func=forward_step, num_microbatches=8, data_iterator=None, model=None) == 1

    def failing(*, forward_step_func: Any, num_microbatches: int, **kwargs: Any) -> None:
        raise RuntimeError("device error")

    with pytest.raises(RuntimeError, match="device error"):
        fcp_forward_backward(failing, runtime)(forward_step_func=forward_step, num_microbatches=1)
    with pytest.raises(FCPRuntimeError, match="no FCP step is running"):
        runtime.step_rounds


def _tp2_layout_and_groups(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron.core import parallel_state

    from mindspeed_mm.features_manager.fcp.megatron.model_parallel import initialize_model_parallel_wrapper
    from mindspeed_mm.features_manager.fcp.runtime import get_fcp_runtime, reset_fcp_runtime

    from mindspeed_mm.core.fcp.runtime.step_runtime import framework_communicators_held

    runtime = reset_fcp_runtime(FCPRuntimeSettings(group_pool="prewarm", max_degree=2))
    initialize_model_parallel_wrapper(parallel_state.initialize_model_parallel)(tensor_model_parallel_size=2)
    assert get_fcp_runtime() is runtime
    layout = runtime.require_layout()
    # Megatron's own groups and the world group, FCP's prewarmed ones left out.
    framework = framework_communicators_held(rank) - runtime.groups.num_communicators
    prewarmed = runtime.groups.num_communicators
    plan = make_plan([[((0, 1), "ring", (0,))], [((0,), "ring", (1,)), ((1,), "ring", (2,))]], num_ranks=2)
    rounds = runtime.begin_step(plan)
    sums = []
    for _ in rounds:
        fcp_round = runtime.next_round()
        group = runtime.process_group(fcp_round)
        value = torch.tensor([float(rank + 1)])
        if group is not None:
            dist.all_reduce(value, group=group)
        sums.append(float(value))
    runtime.end_step()

    # A measuring plan source gets every group's time; this rank's clock says round 0 took
    # ROUND_MS[rank][0] ms and round 1 ROUND_MS[rank][1] ms.
    source = _RecordingSource(plan)
    boundaries = iter([0.0, ROUND_MS[rank][0] / 1e3, sum(ROUND_MS[rank]) / 1e3])
    measuring = FCPRuntime(FCPRuntimeSettings(), clock=lambda: next(boundaries))
    measuring.set_layout(layout)
    measuring.set_plan_source(source)
    for _ in measuring.begin_step():
        measuring.next_round()
    measuring.end_step()
    parallel_state.destroy_model_parallel()
    return {"planes": layout.planes, "fcp_rank": layout.fcp_rank, "prewarmed": prewarmed, "framework": framework,
            "groups": [r.group_ranks for r in rounds], "sums": sums, "measured": source.measured}


ROUND_MS = {0: (10.0, 5.0), 1: (12.0, 6.0), 2: (14.0, 7.0), 3: (11.0, 8.0)}
"""Per global rank, the time its clock shows for round 0 and round 1 of the measured step."""


class _RecordingSource:
    """A measuring plan source handing out one plan and keeping what it is told."""

    wants_measurements = True

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.measured: list[list[list[float]]] = []
        self.steps: list[int] = []

    def __call__(self, step: int) -> Plan:
        self.steps.append(step)
        return self.plan

    def record_measured(self, step: int, measured_group_ms: list[list[float]]) -> None:
        assert step == self.steps[-1], "the times are of the step handed out last"
        self.measured.append(measured_group_ms)


def test_tensor_parallel_planes_and_their_groups_on_four_processes() -> None:
    """TP = 2 on 4 ranks: FCP planes are (0, 2) and (1, 3); a plan's degree-2 group is (0, 2) in one plane
    and (1, 3) in the other, and its process group reduces over exactly those ranks. A measuring plan
    source receives every group's time, the same on every rank."""
    results = run_distributed(_tp2_layout_and_groups, 4, timeout_s=300.0)
    for rank, result in enumerate(results):
        plane = (0, 2) if rank % 2 == 0 else (1, 3)
        assert result["planes"] == ((0, 2), (1, 3))
        assert result["fcp_rank"] == plane.index(rank)
        assert result["prewarmed"] == 1, "prewarm creates the one degree-2 group of this rank's plane"
        # Megatron-core 0.12.1's real initialize_model_parallel: the groups the memory model counts.
        assert result["framework"] == framework_communicators(2, tp=2) == 12
        assert result["groups"] == [plane, (rank,)]
        assert result["sums"] == [float(sum(r + 1 for r in plane)), float(rank + 1)]
        # FCP rank 0 is global rank 0 in one plane and 1 in the other (FCP rank 1: global 2 and 3); its time is
        # the slower plane's. Round 0's group (0, 1) took the smaller of its ranks' times.
        fcp0 = [max(ROUND_MS[0][k], ROUND_MS[1][k]) for k in range(2)]
        fcp1 = [max(ROUND_MS[2][k], ROUND_MS[3][k]) for k in range(2)]
        assert result["measured"] == [[[pytest.approx(min(fcp0[0], fcp1[0]))],
                                       [pytest.approx(fcp0[1]), pytest.approx(fcp1[1])]]]


def test_a_failed_exchange_of_the_round_times_names_the_step_and_the_ranks(monkeypatch) -> None:
    import torch.distributed as dist

    from mindspeed_mm.core.fcp.runtime.comm_errors import CommunicationError
    from mindspeed_mm.core.fcp.runtime import step_runtime as runtime_module

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        plan = make_plan([[((0,), "ring", (0,))]], num_ranks=1)
        runtime = FCPRuntime(FCPRuntimeSettings(comm_timeout_s=5.0), clock=iter([0.0, 1.0, 2.0, 3.0]).__next__)
        runtime.set_layout(FCPRankLayout(planes=((0,),), rank=0))
        runtime.set_plan_source(_RecordingSource(plan))
        for _ in runtime.begin_step():
            runtime.next_round()
        runtime.end_step()  # step 1 exchanges its times

        def stalled(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("[gloo] Timed out waiting 5000ms for recv operation to complete")

        monkeypatch.setattr(runtime_module.dist, "all_reduce", stalled)
        for _ in runtime.begin_step():
            runtime.next_round()
        with pytest.raises(CommunicationError, match=r"step 2: the measured round times over the group of ranks \[0\] "
                                                     r"failed within the 5 s communication timeout"):
            runtime.end_step()
    finally:
        dist.destroy_process_group()


def _hybrid_round_groups(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed as dist

    from mindspeed_mm.core.fcp.parallel import HybridGroup
    from mindspeed_mm.core.fcp.solver import GroupPlan, RoundPlan
    from mindspeed_mm.core.fcp.solver.hybrid_split import HybridSplit

    # Blocks of at most 2 ranks (two ranks per node): degree 4 runs hybrid as 2 x 2.
    runtime = FCPRuntime(FCPRuntimeSettings(hybrid_block=2))
    runtime.set_layout(FCPRankLayout(planes=(tuple(range(world_size)),), rank=rank))
    hybrid = GroupPlan((0, 1, 2, 3), 4, "hybrid", (0,), 1.0, hybrid=HybridSplit(2, 2))
    plan = Plan((RoundPlan((hybrid,), 1.0), RoundPlan((GroupPlan((0, 1, 2, 3), 4, "ring", (1,), 1.0),), 1.0)),
                2.0, 1.0, 0.0, 4)
    rounds = runtime.begin_step(plan)
    created = runtime.groups.num_created
    sums = {}
    for fcp_round in rounds:
        runtime.next_round()
        group = runtime.attention_group(fcp_round)
        if isinstance(group, HybridGroup):
            for name, members in (("block", group.ulysses_group), ("ring", group.ring_group)):
                value = torch.tensor([float(rank + 1)])
                dist.all_reduce(value, group=members)
                sums[name] = float(value)
            sums["rank"] = group.rank
            # The group as a whole stays the round's process group (the vision split exchanges over it).
            assert runtime.process_group(fcp_round) is runtime.groups.get((0, 1, 2, 3))
        else:
            assert group is runtime.process_group(fcp_round)
    runtime.end_step()
    return {"hybrid": [r.hybrid for r in rounds], "created": created, "sums": sums,
            "bound": runtime.groups.max_communicators}


def test_a_hybrid_round_attends_over_its_block_and_its_ring() -> None:
    """A 2 x 2 hybrid group on 4 ranks: the step creates the group, its blocks {0, 1}, {2, 3} and its rings {0, 2},
    {1, 3}; each rank's attention group reduces over its own block and ring, and names its place in the group."""
    from mindspeed_mm.core.fcp.solver.hybrid_split import HybridSplit

    for rank, result in enumerate(run_distributed(_hybrid_round_groups, 4, timeout_s=300.0)):
        assert result["hybrid"] == [HybridSplit(2, 2), None]
        assert result["created"] == 5
        # The pool's bound: the 6 contiguous ranges of 2-4 of 4 ranks and the 2 rings of a 2 x 2 split.
        assert result["bound"] == 8
        block, ring = (0, 1) if rank < 2 else (2, 3), (0, 2) if rank % 2 == 0 else (1, 3)
        assert result["sums"] == {"block": float(sum(r + 1 for r in block)), "ring": float(sum(r + 1 for r in ring)),
                                  "rank": rank}
