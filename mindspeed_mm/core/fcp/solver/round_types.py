"""Values of the per-round search: its limits, the groupings it evaluates and the rounds it returns.

`RoundSolver` (`round_layout`) produces them; the start groupings (`round_starts`), the local search
(`round_search`), the large-batch polish (`round_polish`) and the planner read them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.group_times import SampleWorkloads


@dataclass(frozen=True)
class SearchLimits:
    """How hard the per-round search tries; the planner scales these with the batch size."""

    uniform_degrees: tuple[int, ...]
    """Group sizes g of the uniform start groupings."""
    bin_fractions: tuple[float, ...]
    """Fractions of the free ranks used as one-rank groups by the time-balanced (LPT) start grouping."""
    packing_starts: bool
    """Also start from the stage 1 memory packing and from one group per sample."""
    max_moves: int
    """Improving moves accepted at most per round (local search or polish)."""
    max_evaluations: int
    """Candidate moves the local search evaluates at most per round (a work budget counted in moves,
    not seconds)."""
    max_targets: int
    """Fastest groups tried as destinations when moving a sample out of the slowest group."""
    max_movers: int
    """Samples of the slowest group (smallest first) tried for moving / pulling out (polish: also
    the samples of a target tried for swapping)."""
    first_improvement: bool
    """Local search: take the first improving move instead of the best one."""
    polish_min_gain: float = 0.0
    """Polish: it stops once the k slowest groups are within this fraction of the round of the
    k + 1-th slowest, k the steps left (each step relieves one slowest group, so about that much is
    left to gain)."""


@dataclass(frozen=True)
class GroupChoice:
    """A group of a round before placement on concrete ranks."""

    samples: tuple[int, ...]
    """Sample indices, ascending."""
    degree: int
    """Ranks of the group."""
    algo: str
    """Fastest algo at that degree."""
    predicted_ms: float
    """Predicted time of the group."""


@dataclass(frozen=True)
class RoundChoice:
    """Groups and degrees of one round."""

    groups: tuple[GroupChoice, ...]
    """The round's groups; their degrees sum to the number of ranks."""
    makespan: float
    """Predicted time of the round: the slowest group."""


@dataclass(frozen=True)
class SampleFacts:
    """Per-sample figures the round search uses (all indexed by sample)."""

    lengths: Sequence[int]
    """LLM tokens."""
    workloads: SampleWorkloads
    """Cost-model workloads of samples and of groups of samples."""
    min_degrees: Sequence[int]
    """Fewest ranks whose memory holds the sample."""
    device_ms: list[float]
    """Estimated rank-milliseconds: minimum degree x time on it."""
    one_rank_ms: list[float]
    """Time on a single rank (inf when the sample needs more than one rank)."""


class CandidateGroup:
    """A candidate group with its memoised times on every degree it may get."""

    __slots__ = ("samples", "min_degree", "times", "algos")

    def __init__(self, samples: tuple[int, ...], min_degree: int, times: np.ndarray, algos: np.ndarray) -> None:
        self.samples = samples
        self.min_degree = min_degree
        self.times = times  # best time on min_degree + s ranks, inf where not allowed
        self.algos = algos  # index of that best algo


@dataclass(frozen=True)
class RoundStart:
    """A start grouping of a round, evaluated with its optimal degree split."""

    members: np.ndarray
    """The round's samples."""
    owners: np.ndarray
    """owners[j]: the group (0, 1, ...; none empty) of sample members[j]."""
    makespan: float
    """Optimal makespan of the groups."""
    window: int
    """Degree window the split was made with."""
    min_degrees: np.ndarray
    """Minimum degree of each group (memory)."""
    times: np.ndarray
    """times[k, s]: best time of group k on min_degrees[k] + s ranks."""
    algos: np.ndarray
    """Index of that best algo."""

    def grouping(self) -> list[tuple[int, ...]]:
        """The groups as ascending sample tuples, group 0 first."""
        return owned_tuples(self.members, self.owners)


def at_window_edge(times: np.ndarray, algos: np.ndarray, makespan: float, min_degrees: np.ndarray,
                   top_degree: int) -> bool:
    """Whether a group that sets the makespan might run faster on more ranks than its window holds
    (times[k, s] with algo index algos[k, s]: group k on min_degrees[k] + s ranks), so a wider window
    might shorten the round: its window ends below `top_degree` and its shortest time is at the
    window's last degree, or the algo of its last finite time still runs faster there than on the
    window's previous degree where that algo was the best. The best algo's curve is not monotone when
    algos mix (Ulysses runs only on degrees that split the heads, and may beat the ring there), so a
    best time inside the window is no proof that more ranks would not help."""
    best = times.min(axis=1)
    setting = np.flatnonzero((best >= makespan) & (np.asarray(min_degrees) + times.shape[1] - 1 < top_degree))
    if setting.size == 0:
        return False
    rows = times[setting]
    if np.any(rows[:, -1] <= best[setting]):
        return True
    finite = np.isfinite(rows)
    columns = np.arange(rows.shape[1])
    last = np.where(finite, columns, -1).max(axis=1)
    has_last = last >= 0
    row_ids = np.arange(rows.shape[0])
    last_algo = algos[setting][row_ids, last]
    same = finite & (algos[setting] == last_algo[:, None]) & (columns < last[:, None])
    before = np.where(same, columns, -1).max(axis=1)
    comparable = has_last & (before >= 0)
    picked = row_ids[comparable]
    return bool(np.any(rows[picked, last[comparable]] < rows[picked, before[comparable]]))


def owned_tuples(members: np.ndarray, owners: np.ndarray) -> list[tuple[int, ...]]:
    """Ascending sample tuples of the non-empty groups, in owner order."""
    if members.size == 0:
        return []
    order = np.lexsort((members, owners))
    ordered = members[order].tolist()
    ends = np.cumsum(np.bincount(owners)).tolist()
    return [tuple(ordered[begin:end]) for begin, end in zip([0, *ends], ends) if end > begin]


def sorted_grouping(members: np.ndarray, owners: np.ndarray) -> list[tuple[int, ...]]:
    """Ascending sample tuples of the groups (owners numbered 0, 1, ...), in ascending order."""
    return sorted(owned_tuples(members, owners))


def assignment(grouping: Sequence[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray, int]:
    """(members, owners, group count) of a grouping."""
    sizes = [len(g) for g in grouping]
    members = np.fromiter((i for g in grouping for i in g), dtype=np.int64, count=sum(sizes))
    return members, np.repeat(np.arange(len(grouping)), sizes), len(grouping)


class RoundSolverView(Protocol):
    """What the start and move helpers (`round_starts`, `round_search`) read of `round_layout.RoundSolver`."""

    facts: SampleFacts
    lengths: Sequence[int]
    capacity_tokens: int
    num_ranks: int
    top_degree: int
    limits: SearchLimits
    min_degrees: np.ndarray

    def marginal_ms(self, degree: int) -> list[float]: ...

    def min_degree_sum(self, grouping: list[tuple[int, ...]]) -> int: ...

    def by_work(self, sample_ids: Sequence[int]) -> np.ndarray: ...

    def known_groups(self, grouping: Sequence[tuple[int, ...]], width: int = 1) -> list[CandidateGroup]: ...

    def time_rows(self, groups: list[CandidateGroup], width: int) -> np.ndarray: ...

    def time_matrix(self, groups: list[CandidateGroup], window: int,
                    margin: int = 0) -> tuple[np.ndarray, int] | None: ...
