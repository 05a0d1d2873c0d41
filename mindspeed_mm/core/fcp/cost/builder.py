"""The one builder of a run's cost model, shared by `fcp plan` / `fcp simulate`, `fcp train` and the MindSpeed feature."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from mindspeed_mm.core.fcp.cost.model import ALGOS, CostModel
from mindspeed_mm.core.fcp.cost.table import ProfileTable


def build_cost_model(*, preset: str | None, profile_table: str | Path | None, max_tokens_per_rank: int | None,
                     algos: Sequence[str] = ALGOS, shard_ranks: int | None = None, ranks_per_node: int | None = None,
                     tp: int = 1, pp: int = 1) -> CostModel:
    """The cost model of a measured `profile_table`, else of `preset`.

    A preset shards parameters, gradients and optimizer state over the run's `shard_ranks` (its FSDP /
    distributed-optimizer group; None: the preset's default, one node), so its memory limit is that of the real
    run, at tensor / pipeline sizes `tp` / `pp`. `ranks_per_node` replaces the node size of either source.
    `max_tokens_per_rank` can only lower the memory limit."""
    if profile_table is not None:
        table = ProfileTable.load(profile_table)
        if ranks_per_node is not None:
            table = dataclasses.replace(table, hardware=dataclasses.replace(table.hardware, ranks_per_node=ranks_per_node))
        return CostModel(table, max_tokens_per_rank=max_tokens_per_rank, algos=algos)
    if preset is None:
        raise ValueError("a cost model needs a preset or a profile table")
    options: dict[str, int] = {}
    if shard_ranks is not None:
        options["shard_ranks"] = shard_ranks
    if ranks_per_node is not None:
        options["ranks_per_node"] = ranks_per_node
    if tp != 1:
        options["tp"] = tp
    if pp != 1:
        options["pp"] = pp
    return CostModel.from_preset(preset, max_tokens_per_rank=max_tokens_per_rank, algos=algos, **options)
