"""The one builder of a run's cost model, shared by `fcp plan` / `fcp simulate`, `fcp train` and the MindSpeed feature."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from mindspeed_mm.core.fcp.cost.communicator_memory import (
    CommunicatorMemory, CommunicatorMemoryError, communicator_memory,
)
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.model import ALGOS, CostModel, ModelDoesNotFitError
from mindspeed_mm.core.fcp.cost.presets import preset_table
from mindspeed_mm.core.fcp.cost.table import ProfileTable


def frozen_vision_table(table: ProfileTable) -> ProfileTable:
    """`table` for a run whose vision tower is frozen: the encoder runs its forward pass only (its figures times
    the forward share of forward + backward, 1 / (1 + the backward / forward ratio of the table's matmul work))
    and keeps no activations for a backward pass."""
    tm = table.time
    if table.model.vision is None:
        return table
    forward = 1.0 / (1.0 + tm.linear_backward_ratio)
    vision_ms = None if tm.vision_ms is None else Grid(tm.vision_ms.x, tuple(y * forward for y in tm.vision_ms.y),
                                                       tm.vision_ms.scale)
    time = dataclasses.replace(tm, vision_ms_per_patch=tm.vision_ms_per_patch * forward,
                               vision_ms_per_call=tm.vision_ms_per_call * forward, vision_ms=vision_ms)
    memory = dataclasses.replace(table.memory, vision_activation_bytes_per_token=0.0)
    provenance = {**table.provenance, "vision_frozen": "the encoder's forward only, no activations kept"}
    return dataclasses.replace(table, time=time, memory=memory, provenance=provenance)


def with_communicator_buffers(table: ProfileTable, communicators: CommunicatorMemory) -> ProfileTable:
    """`table` with the buffers of a rank's communicators (`communicator_memory`) added to its fixed working memory."""
    memory = dataclasses.replace(table.memory,
                                 workspace_bytes=table.memory.workspace_bytes + communicators.total_bytes)
    provenance = {**table.provenance, "communicator_buffers": communicators.describe()}
    return dataclasses.replace(table, memory=memory, provenance=provenance)


def build_cost_model(*, preset: str | None, profile_table: str | Path | None, max_tokens_per_rank: int | None,
                     algos: Sequence[str] = ALGOS, shard_ranks: int | None = None, ranks_per_node: int | None = None,
                     tp: int = 1, pp: int = 1, vision_frozen: bool = False, expert_parallel: int = 1,
                     communicators: tuple[int, int] | None = None) -> CostModel:
    """The cost model of a measured `profile_table`, else of `preset`.

    A preset shards parameters, gradients and optimizer state over the run's `shard_ranks` (its FSDP /
    distributed-optimizer group; None: the preset's default, one node), so its memory limit is that of the real
    run, at tensor / pipeline sizes `tp` / `pp`. `ranks_per_node` replaces the node size of either source.
    `max_tokens_per_rank` can only lower the memory limit. `vision_frozen`: the run does not train the vision
    tower (`frozen_vision_table`). `expert_parallel`: ranks the run splits a mixture-of-experts model's experts over
    (a preset is built so; a measured table must have been measured so). `communicators`: (FCP's, MindSpeed /
    Megatron's) communicators of a rank, whose buffers on the table's device (`communicator_memory`) the memory limit
    sets aside (an error with the figures when nothing is left)."""
    if profile_table is not None:
        table = ProfileTable.load(profile_table)
        if table.expert_parallel != expert_parallel:
            raise ValueError(f"profile table {profile_table} prices expert_parallel {table.expert_parallel}, the run "
                             f"splits its experts over {expert_parallel} ranks")
        if ranks_per_node is not None:
            table = dataclasses.replace(table, hardware=dataclasses.replace(table.hardware, ranks_per_node=ranks_per_node))
    elif preset is None:
        raise ValueError("a cost model needs a preset or a profile table")
    else:
        table = preset_table(preset, **_preset_options(shard_ranks, ranks_per_node, tp, pp, expert_parallel))
    if vision_frozen:
        table = frozen_vision_table(table)
    buffers = None if communicators is None else communicator_memory(table.hardware.device, *communicators)
    if buffers is None:
        return CostModel(table, max_tokens_per_rank=max_tokens_per_rank, algos=algos)
    CostModel(table, algos=algos)   # the model alone must fit (its own error says why not)
    try:
        return CostModel(with_communicator_buffers(table, buffers), max_tokens_per_rank=max_tokens_per_rank,
                         algos=algos)
    except ModelDoesNotFitError as error:
        raise CommunicatorMemoryError(
            f"the buffers of a rank's communicators ({buffers.describe()}) leave no memory for activations: "
            f"{error}; lower the communicator budget (fcp_communicator_budget / --fcp-communicator-budget) or "
            f"HCCL_BUFFSIZE") from None


def _preset_options(shard_ranks: int | None, ranks_per_node: int | None, tp: int, pp: int,
                    expert_parallel: int) -> dict[str, int]:
    options: dict[str, int] = {}
    if expert_parallel != 1:
        options["expert_parallel"] = expert_parallel
    if shard_ranks is not None:
        options["shard_ranks"] = shard_ranks
    if ranks_per_node is not None:
        options["ranks_per_node"] = ranks_per_node
    if tp != 1:
        options["tp"] = tp
    if pp != 1:
        options["pp"] = pp
    return options
