"""The one check of a batch's sample lengths, shared by the planner, the baselines, the exact model and the
length tools."""
from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np


def checked_counts(values: Sequence[int], name: str, minimum: int) -> np.ndarray:
    """Per-sample counts as int64; a ValueError naming the first bad sample (not an integer, a bool,
    or below `minimum`)."""
    if len(values) == 0:
        if name == "length":
            raise ValueError("lengths is empty: a global batch needs at least one sample")
        return np.zeros(0, dtype=np.int64)
    arr = np.asarray(values)
    exact = isinstance(values, np.ndarray) or bool not in set(map(type, values))
    if arr.ndim == 1 and arr.dtype.kind in "iu" and exact and arr.min() >= minimum:
        return arr.astype(np.int64, copy=False)
    rule = "a positive integer" if minimum > 0 else "a non-negative integer"
    for i, value in enumerate(values):
        try:
            number = operator.index(value)
        except TypeError:
            raise ValueError(f"sample {i}: {name} must be an integer, got {value!r}") from None
        if isinstance(value, (bool, np.bool_)) or number < minimum:
            raise ValueError(f"sample {i}: {name} must be {rule}, got {value!r}")
    raise ValueError(f"{name} must be a flat list of integers")


def checked_sample_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """A batch's token lengths as int64: a non-empty flat sequence of positive integers."""
    return checked_counts(lengths, "length", 1)
