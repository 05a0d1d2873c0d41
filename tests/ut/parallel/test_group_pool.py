"""CommGroupPool on 6 gloo ranks: concurrent groups of different sizes, changing layouts, bounds, errors; the
runtime's prewarm of the groups its communicator budget allows."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from attention_reference import dense_attention
from distributed_utils import run_distributed
from mindspeed_mm.core.fcp.parallel import CommGroupPool, CommGroupPoolFullError, fcp_attention, zigzag_shard

WORLD_SIZE = 6
# The second layout reuses (0, 1, 2) but is new for ranks 3..5, so the third one pairs ranks 2 and 3
# while they hold different numbers of groups (the case member-only creation deadlocks on).
LAYOUTS = (
    ((0, 1, 2), (3, 4), (5,)),
    ((0, 1, 2), (3, 4, 5)),
    ((0, 1), (2, 3), (4, 5)),
    ((0, 1, 2), (3, 4), (5,)),
)


def _attention_matches_reference(ranks: tuple[int, ...], group: dist.ProcessGroup, seed: int, rank: int) -> None:
    degree, group_rank = len(ranks), ranks.index(rank)
    cu = [0, 3, 50, 51, 90]
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(cu[-1], 4, 8, dtype=torch.float64, generator=generator) for _ in range(3))
    algo = "ulysses" if degree in (2, 4) else "ring"
    out = fcp_attention(*(zigzag_shard(x, cu, group_rank, degree) for x in (q, k, v)), cu, group=group, algo=algo)
    expected = dense_attention(q, k, v, cu, causal=True)
    torch.testing.assert_close(out, zigzag_shard(expected, cu, group_rank, degree))


def _pool_world(rank: int, world_size: int) -> dict:
    pool = CommGroupPool(max_communicators=8)
    pool.prewarm([range(world_size)])
    first = pool.get(range(world_size))
    _attention_matches_reference(tuple(range(world_size)), first, seed=99, rank=rank)

    group_ids, held = [], []
    for index, layout in enumerate(LAYOUTS):
        pool.prewarm(layout)
        mine = next(ranks for ranks in layout if rank in ranks)
        group = pool.get(mine)
        assert dist.get_process_group_ranks(group) == list(mine)
        _attention_matches_reference(mine, group, seed=index, rank=rank)
        group_ids.append(id(group))
        held.append(pool.num_communicators)

    errors = {}
    for name, call in {
        "not_member": lambda: pool.get([(rank + 1) % world_size]),
        "duplicate": lambda: pool.get([rank, rank]),
        "out_of_range": lambda: pool.get([rank, world_size]),
        "not_created": lambda: pool.get([rank, (rank + 3) % world_size]),  # in no layout
        "prewarm_full": lambda: CommGroupPool(max_communicators=2).prewarm([(0,), (1,), (2,)]),
    }.items():
        try:
            call()
        except (ValueError, CommGroupPoolFullError) as error:
            errors[name] = f"{type(error).__name__}: {error}"

    return {"group_ids": group_ids, "held": held, "errors": errors, "first_cached": pool.get(range(world_size)) is first,
            "runtime": _prewarmed_runtime(rank, world_size)}


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_distributed(_pool_world, WORLD_SIZE, timeout_s=300)


def test_layouts_change_and_groups_are_reused(results: list[dict]) -> None:
    for rank, result in enumerate(results):
        distinct = {tuple(next(r for r in layout if rank in r)) for layout in LAYOUTS[:3]}
        # The world group plus one group per distinct layout this rank was in.
        assert result["held"][-1] == 1 + len(distinct)
        assert result["held"][3] == result["held"][2]  # the repeated layout created nothing
        assert result["group_ids"][3] == result["group_ids"][0]
        assert result["first_cached"]


def test_bad_requests_and_full_pool_raise_clear_errors(results: list[dict]) -> None:
    for rank, result in enumerate(results):
        errors = result["errors"]
        assert f"global rank {rank} asked for group" in errors["not_member"]
        assert "distinct" in errors["duplicate"]
        assert "[0, 6)" in errors["out_of_range"]
        assert "has not been created" in errors["not_created"]
        assert errors["prewarm_full"].startswith("CommGroupPoolFullError: creating 3 more groups")


def _prewarmed_runtime(rank: int, world_size: int) -> dict:
    """The runtime's prewarm on a plane of all ranks: every catalogue group created and made ready by a first
    collective of its members, in one order on every rank; a step within the catalogue creates nothing more."""
    from plan_fakes import make_plan
    from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRankLayout, FCPRuntime, FCPRuntimeSettings

    first_collectives = []
    all_reduce = dist.all_reduce

    def recording(tensor, *args, group=None, **kwargs):
        first_collectives.append(tuple(dist.get_process_group_ranks(group)) if group is not None else ())
        return all_reduce(tensor, *args, group=group, **kwargs)

    dist.all_reduce = recording
    try:
        runtime = FCPRuntime(FCPRuntimeSettings(group_pool="prewarm"))
        runtime.set_layout(FCPRankLayout(planes=(tuple(range(world_size)),), rank=rank))
        held = runtime.groups.num_communicators
        made_ready = list(first_collectives)
        plan = make_plan([[((0, 1, 2), "ring", (0,)), ((3,), "ring", (1,)), ((4, 5), "ulysses", (2,))]],
                         num_ranks=world_size)
        runtime.begin_step(plan)
        for _ in range(plan.num_rounds):
            runtime.next_round()
        runtime.end_step()
    finally:
        dist.all_reduce = all_reduce
    catalogue = runtime.catalogue
    return {"made_ready": made_ready, "held": held, "after_step": runtime.groups.num_communicators,
            "joined": [c for c in catalogue.communicators() if rank in c], "count": catalogue.counts[rank],
            "budget": catalogue.budget, "degrees": catalogue.degrees}


def test_prewarm_makes_every_group_of_the_budget_ready_and_holds_the_bound(results: list[dict]) -> None:
    for rank, result in enumerate(result["runtime"] for result in results):
        # 6 ranks: ceil(log2 6) + 4 = 7 communicators; every contiguous range would put 11 on ranks 2 and 3.
        assert result["budget"] == 7 and result["degrees"] == (2, 3, 4, 5, 6)
        assert result["joined"] and result["made_ready"] == result["joined"]  # one first collective each, in order
        assert result["held"] == result["after_step"] == result["count"] <= result["budget"]
