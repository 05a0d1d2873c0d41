"""Distributed attention for FCP groups: zigzag sharding, ring / Ulysses / hybrid attention, kernels, group pool."""
from mindspeed_mm.core.fcp.parallel.attention import ATTENTION_ALGOS, AttentionGroup, fcp_attention
from mindspeed_mm.core.fcp.parallel.collectives import CommStats
from mindspeed_mm.core.fcp.parallel.group_pool import CommGroupPool, CommGroupPoolFullError
from mindspeed_mm.core.fcp.parallel.hybrid_group import HybridGroup
from mindspeed_mm.core.fcp.parallel.zigzag import (
    RankShard,
    ZigzagLayout,
    zigzag_layout,
    zigzag_positions,
    zigzag_shard,
    zigzag_unshard,
)

__all__ = [
    "ATTENTION_ALGOS",
    "AttentionGroup",
    "CommGroupPool",
    "CommGroupPoolFullError",
    "CommStats",
    "HybridGroup",
    "RankShard",
    "ZigzagLayout",
    "fcp_attention",
    "zigzag_layout",
    "zigzag_positions",
    "zigzag_shard",
    "zigzag_unshard",
]
