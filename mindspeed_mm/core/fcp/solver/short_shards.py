"""What a CP group does with documents too short for its degree: the one rule of the plan check, the demo trainer
and MindSpeed-MM's runtime.

Every document of a group of degree d is cut into 2d zigzag chunks whose sizes differ by at most one token, longer
chunks first; rank j holds chunks j and 2d-1-j. A document of L < 2d tokens leaves chunks L.. empty, so rank j
holds a token of it only when L > j: that is exact (attention and loss simply see no token of that document on
that rank). But when every document is shorter than d tokens, the middle ranks hold no token at all, and an
empty shard breaks the decoder's layers (a zero-length sequence). Then the group appends one padding document of
2d tokens (two per rank): it attends only to itself, weighs 0 in the loss and owns no vision feature, so the
samples' outputs and gradients are unchanged. Its tokens count against the group's memory like any other.
"""
from __future__ import annotations

from collections.abc import Sequence


def padding_length(lengths: Sequence[int], degree: int) -> int:
    """Tokens of the padding document a group of `degree` ranks appends to documents of these lengths: `2 * degree`
    when the longest is shorter than `degree` (some rank's zigzag shard would be empty), else 0."""
    if degree < 1:
        raise ValueError(f"degree must be a positive integer, got {degree}")
    if not lengths:
        raise ValueError("a group needs at least one document")
    return 2 * degree if max(lengths) < degree else 0


def executed_lengths(lengths: Sequence[int], degree: int) -> list[int]:
    """The document lengths a group of `degree` ranks runs: the samples', then its padding document, if any."""
    padding = padding_length(lengths, degree)
    return [int(n) for n in lengths] + ([padding] if padding else [])


__all__ = ["executed_lengths", "padding_length"]
