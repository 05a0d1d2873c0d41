"""Megatron's `get_batch_on_this_cp_rank` for FCP: this rank's zigzag shard of its group's packed batch."""
from __future__ import annotations

from typing import Any

from mindspeed_mm.core.fcp.executor.packed_shard import shard_packed_batch

from ..runtime import get_fcp_runtime


def get_batch_on_this_cp_rank(batch: dict[str, Any]) -> dict[str, Any]:
    """Replacement of Megatron's function: shards for the round the FCP driver is running (every member
    of the group receives the same packed batch, with its document boundaries under `cu_seqlens`)."""
    runtime = get_fcp_runtime()
    fcp_round = runtime.current_round
    return shard_packed_batch(batch, rank_in_group=fcp_round.rank_in_group, degree=fcp_round.degree,
                              group=runtime.process_group(fcp_round), algo=fcp_round.algo,
                              kernel=runtime.settings.attention_kernel)
