"""The parallel layout FCP needs from Megatron's arguments: no static CP, one-sample micro-batches, the DP x CP plane.

Imports nothing of ``mindspeed_mm``: the feature checks these in MindSpeed's first parse, before the adaptor.
"""
from __future__ import annotations

import argparse
import os

from .options import FCP_CP_ALGO, FCPOptionError, int_argument


def check_static_layout(args: argparse.Namespace) -> None:
    """What FCP refuses before anything is built; works on MindSpeed's string-valued first parse too."""
    cp_size = int_argument(args, "context_parallel_size", 1)
    if cp_size != 1:
        raise FCPOptionError(
            f"--context-parallel-size={cp_size} (YAML key context_parallel_size) with --context-parallel-algo "
            f"{FCP_CP_ALGO}: FCP chooses the CP degree of every group itself, so Megatron must build no static CP "
            "groups; set context_parallel_size: 1 and bound the groups with fcp_max_degree")
    micro_batch_size = int_argument(args, "micro_batch_size", 1)
    if micro_batch_size != 1:
        raise FCPOptionError(
            f"--micro-batch-size={micro_batch_size}: FCP packs each round's samples into one sequence per group, "
            "so the micro-batch size must be 1")


def fcp_ranks(args: argparse.Namespace) -> int:
    """Size of the DP x CP plane FCP re-partitions."""
    world_size = getattr(args, "world_size", None) or int(os.environ.get("WORLD_SIZE", "1"))
    model_parallel = (int_argument(args, "tensor_model_parallel_size", 1)
                      * int_argument(args, "pipeline_model_parallel_size", 1))
    return max(1, world_size // model_parallel)


__all__ = ["check_static_layout", "fcp_ranks"]
