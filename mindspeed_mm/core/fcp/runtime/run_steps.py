"""The training steps of a run: the one definition of which steps are planned, given to everything that plans."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSteps:
    """Steps `first` .. `first + count - 1` (zero-based; a resumed run starts past 0)."""

    first: int
    count: int

    def __post_init__(self) -> None:
        if self.first < 0:
            raise ValueError(f"the first step must be >= 0, got {self.first}")
        if self.count <= 0:
            raise ValueError(f"a run needs at least one step, got {self.count}")

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def __contains__(self, step: object) -> bool:
        return isinstance(step, int) and self.first <= step <= self.last

    def check(self, step: int) -> None:
        """Raises ValueError unless `step` is one of the run's."""
        if step not in self:
            raise ValueError(f"step {step} is outside the run's steps {self.first}..{self.last}")


__all__ = ["RunSteps"]
