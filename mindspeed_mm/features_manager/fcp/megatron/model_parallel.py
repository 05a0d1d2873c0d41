"""Model-parallel initialisation that records the FCP planes (and prewarms their groups)."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ..runtime import FCPRankLayout, get_fcp_runtime


def fcp_rank_layout() -> FCPRankLayout:
    """The DP x CP planes of the initialised Megatron state, gathered from every rank (collective)."""
    from megatron.core import parallel_state

    group = parallel_state.get_data_parallel_group(with_context_parallel=True)
    plane = tuple(sorted(dist.get_process_group_ranks(group)))
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, plane)
    planes = tuple(sorted(set(gathered)))
    return FCPRankLayout(planes=planes, rank=dist.get_rank())


def initialize_model_parallel_wrapper(initialize: Callable[..., None]) -> Callable[..., None]:
    """Megatron builds its groups with CP = 1 (FCP owns the CP dimension); then FCP records its planes."""
    signature = inspect.signature(initialize)

    @functools.wraps(initialize)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        context_parallel_size = bound.arguments.get("context_parallel_size", 1)
        if context_parallel_size != 1:
            raise ValueError(
                f"initialize_model_parallel got context_parallel_size={context_parallel_size}, but with "
                "--context-parallel-algo fcp_cp_algo Megatron must see CP = 1 (FCP forms the CP groups every "
                "step); the FCP feature sets it during argument validation"
            )
        initialize(*args, **kwargs)
        get_fcp_runtime().set_layout(fcp_rank_layout())

    return wrapper
