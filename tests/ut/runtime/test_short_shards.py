"""The short-shard rule: a group pads exactly when some rank's zigzag shard would be empty, and never after."""
from __future__ import annotations

import itertools

import pytest

from mindspeed_mm.core.fcp.parallel import zigzag_layout
from mindspeed_mm.core.fcp.runtime.packed_lengths import cumulative_lengths
from mindspeed_mm.core.fcp.solver.short_shards import executed_lengths, padding_length


def empty_shards(lengths: list[int], degree: int) -> int:
    return sum(shard.length == 0 for shard in zigzag_layout(cumulative_lengths(lengths), degree).shards)


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 5])
def test_padding_exactly_when_a_zigzag_shard_would_be_empty(degree: int) -> None:
    for count in (1, 2):
        for lengths in itertools.product(range(1, 2 * degree + 2), repeat=count):
            lengths = list(lengths)
            padded = padding_length(lengths, degree) > 0
            assert padded == (empty_shards(lengths, degree) > 0), (lengths, degree)
            assert empty_shards(executed_lengths(lengths, degree), degree) == 0
            if padded:
                assert executed_lengths(lengths, degree) == lengths + [2 * degree]


def test_bad_groups_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one document"):
        padding_length([], 2)
    with pytest.raises(ValueError, match="degree must be a positive integer"):
        padding_length([3], 0)
