"""Errors raised by the FCP planner."""
from __future__ import annotations


class InfeasibleSampleError(ValueError):
    """A sample needs more ranks than any group may have, so no plan can hold it."""

    def __init__(self, index: int, length: int, capacity_tokens: int, max_degree: int) -> None:
        self.index = index
        self.length = length
        self.capacity_tokens = capacity_tokens
        self.max_degree = max_degree
        needed = -(-length // capacity_tokens)
        super().__init__(
            f"sample {index} (length {length} tokens) needs at least {needed} ranks at "
            f"{capacity_tokens} tokens per rank, but the maximum group degree is {max_degree}"
        )


class InvalidPlanError(ValueError):
    """A plan breaks one of the invariants every executable plan must satisfy."""
