"""Checks that the cost model's memory limit holds for the run it plans.

A preset's memory limit counts parameters, gradients and optimizer state sharded over its
`shard_ranks` (`CostModel.state_shard_ranks`). A run of fewer FCP ranks cannot shard them that
wide: each rank keeps more state and holds fewer tokens than the limit says, so plans made with it
may run out of memory. The planners warn once per process and (shard ranks, run ranks).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mindspeed_mm.core.fcp.cost import CostModel

logger = logging.getLogger(__name__)

_warned: set[tuple[int, int]] = set()


def state_sharded_wider_than_run(cost: "CostModel", num_ranks: int) -> str | None:
    """Why the memory limit is optimistic on `num_ranks` ranks, None when it holds."""
    shards = cost.state_shard_ranks
    if shards is None or shards <= num_ranks:
        return None
    return (f"the cost model's memory limit ({cost.capacity_tokens} tokens per rank) shards the model state over "
            f"{shards} ranks but the run has {num_ranks} FCP ranks, so a rank holds fewer tokens than planned: "
            f"build the preset for the run (CostModel.from_preset(..., shard_ranks={num_ranks}); the fcp "
            f"commands do this from --ranks)")


def warn_if_state_sharded_wider(cost: "CostModel", num_ranks: int) -> None:
    """Log a warning (once per process and shard / run ranks) when the memory limit is optimistic."""
    reason = state_sharded_wider_than_run(cost, num_ranks)
    key = (int(cost.state_shard_ranks or 0), int(num_ranks))
    if reason is not None and key not in _warned:
        _warned.add(key)
        logger.warning("%s", reason)
