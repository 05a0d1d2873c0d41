"""Cost-model validation: real group executions on this host against the cost model's predictions.

Each validation round splits the world into groups (degree, algo) that run at the same time, as
in a training round; each group trains a packed batch of mixed lengths forward and backward
through the profiler's decoder (the same code the profile timed: torch projections, MLP, norms
and ``fcp_attention`` over the group). A group's time in one pass is the slowest of its ranks;
passes go round-robin over the rounds so that slow drifts of the host load hit every case alike.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from mindspeed_mm.core.fcp.cost.model import CostModel
from mindspeed_mm.core.fcp.cost.table import ModelShape
from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.profiler.batch import cu_seqlens_of, shard_inputs
from mindspeed_mm.core.fcp.profiler.decoder import Decoder, fcp_core
from mindspeed_mm.core.fcp.profiler.environment import load_average
from mindspeed_mm.core.fcp.profiler.timing import STATISTICS, summarize, synchronize
from mindspeed_mm.core.fcp.profiler.world import run_world
from mindspeed_mm.core.fcp.simulate.workloads import generate, scale_lengths

logger = logging.getLogger(__name__)

TARGET_MAPE_PERCENT = 10.0
"""Acceptance bound on the mean absolute percentage error."""


@dataclass(frozen=True)
class ValidationGroup:
    """One group of a validation round."""

    ranks: tuple[int, ...]
    """Contiguous world ranks of the group."""
    algo: str
    """`ring` or `ulysses` (a group of one runs local attention whatever the algo)."""
    lengths: tuple[int, ...]
    """Document lengths of the group's packed batch."""

    @property
    def degree(self) -> int:
        """Number of ranks."""
        return len(self.ranks)


@dataclass(frozen=True)
class ValidationRound:
    """Groups that run at the same time and cover the world."""

    groups: tuple[ValidationGroup, ...]
    """The round's groups."""


@dataclass(frozen=True)
class CaseResult:
    """Predicted against measured time of one group."""

    round_index: int
    """Index of the round the group ran in."""
    group: ValidationGroup
    """The group."""
    predicted_ms: float
    """Cost-model prediction."""
    measured_ms: float
    """Summary over the passes of the group's time (its slowest rank per pass)."""
    spread: float
    """Interquartile range of the passes over their median: how noisy the measurement was."""

    @property
    def error(self) -> float:
        """Signed relative error of the prediction: (predicted - measured) / measured."""
        return (self.predicted_ms - self.measured_ms) / self.measured_ms


@dataclass(frozen=True)
class ValidationReport:
    """All cases of a validation run and the conditions it ran under."""

    cases: tuple[CaseResult, ...]
    """One entry per group of every round."""
    statistic: str
    """How passes were summarised."""
    passes: int
    """Timed passes per round."""
    seconds: float
    """Wall time of the run."""
    load_before: tuple[float, float, float] | None
    """Host load averages when the run started."""
    load_after: tuple[float, float, float] | None
    """Host load averages when it ended."""

    @property
    def mape(self) -> float:
        """Mean absolute percentage error over the cases."""
        return float(100.0 * np.mean([abs(c.error) for c in self.cases]))

    def lines(self) -> list[str]:
        """The per-case table, the MAPE and the run conditions, as text lines."""
        out = [f"{'round':>5} {'ranks':>7} {'d':>2} {'algo':<8} {'docs':>4} {'tokens':>6} "
               f"{'predicted ms':>12} {'measured ms':>11} {'error':>7} {'spread':>6}"]
        for c in self.cases:
            g = c.group
            ranks = f"{g.ranks[0]}-{g.ranks[-1]}" if g.degree > 1 else str(g.ranks[0])
            algo = g.algo if g.degree > 1 else "local"
            out.append(f"{c.round_index:>5} {ranks:>7} {g.degree:>2} {algo:<8} {len(g.lengths):>4} "
                       f"{sum(g.lengths):>6} {c.predicted_ms:>12.1f} {c.measured_ms:>11.1f} "
                       f"{100 * c.error:>+6.1f}% {100 * c.spread:>5.0f}%")
        out.append(f"MAPE {self.mape:.1f}% over {len(self.cases)} cases (target <= {TARGET_MAPE_PERCENT:.0f}%), "
                   f"{self.statistic} of {self.passes} passes, {self.seconds:.0f} s, "
                   f"load average {_load(self.load_before)} -> {_load(self.load_after)}")
        return out


def _load(load: tuple[float, float, float] | None) -> str:
    return "n/a" if load is None else "/".join(f"{x:.1f}" for x in load)


def default_rounds(world_size: int, heads: int, *, seed: int = 0, tokens_per_rank: Sequence[int] = (160, 320),
                   length_scale: float = 64.0, min_length: int = 8) -> list[ValidationRound]:
    """Rounds covering degrees 1..world_size with ring and Ulysses (where the heads divide).

    Batches are openvid lengths scaled down for CPU (as the tiny training configs do), packed until
    every group holds `tokens_per_rank` x degree tokens, so the groups of a round carry equal load.
    """
    if world_size < 2:
        raise ValueError(f"validation needs a world of at least 2 ranks, got {world_size}")
    pool = iter(scale_lengths(generate("openvid", 4096, seed), length_scale, min_length).tolist())
    ulysses = [d for d in range(2, world_size + 1) if heads % d == 0]
    layouts: list[list[tuple[int, str]]] = []
    for d in range(world_size, 1, -1):
        rest = [(1, "ring")] * (world_size % d)
        layouts.append([(d, "ring")] * (world_size // d) + rest)
        if d in ulysses:
            layouts.append([(d, "ulysses")] * (world_size // d) + rest)
    layouts.append([(1, "ring")] * world_size)
    if 2 in ulysses and world_size >= 3:
        layouts.append([(2, "ring"), (2, "ulysses")][: world_size // 2] + [(1, "ring")] * (world_size % 2))
    rounds = []
    for index, layout in enumerate(layouts):
        budget = tokens_per_rank[index % len(tokens_per_rank)]
        first, groups = 0, []
        for degree, algo in layout:
            lengths = _pack(pool, budget * degree)
            groups.append(ValidationGroup(tuple(range(first, first + degree)), algo, lengths))
            first += degree
        rounds.append(ValidationRound(tuple(groups)))
    return rounds


def _pack(pool, tokens: int) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    """Take lengths from the pool until `tokens`; the last one is cut so the batch holds exactly `tokens`."""
    lengths: list[int] = []
    while sum(lengths) < tokens:
        lengths.append(min(int(next(pool)), tokens - sum(lengths)))
    return tuple(lengths)


def _measure(rank: int, world_size: int, shape: ModelShape, dtype: str, rounds: Sequence[ValidationRound],
             warmup: int, passes: int, runs_per_pass: int, seed: int, progress: bool) -> list[list[float]]:
    """World function: per (round, group containing this rank) in order, this rank's time of every pass."""
    pool = CommGroupPool()
    pool.prewarm([g.ranks for r in rounds for g in r.groups if g.degree > 1])
    causal = shape.attention_mask == "causal"
    model = Decoder(shape, dtype, seed)
    device = torch.device("cpu")
    work = []
    for r in rounds:
        group = next(g for g in r.groups if rank in g.ranks)
        process_group = pool.get(group.ranks) if group.degree > 1 else None
        inputs = shard_inputs(list(group.lengths), shape.vocab, group.ranks.index(rank), group.degree, seed=seed)
        work.append((inputs, fcp_core(cu_seqlens_of(group.lengths), process_group, group.algo, causal)))
    times: list[list[float]] = [[] for _ in rounds]
    bar = tqdm(total=(warmup + passes) * len(rounds), desc="fcp validate", unit="group run", file=sys.stderr,
               disable=not progress or rank != 0)
    for index in range(warmup + passes):
        for slot, (inputs, core) in enumerate(work):
            dist.barrier()
            started = time.perf_counter()
            for _ in range(runs_per_pass):
                model(inputs, core).backward()
                model.zero_grad(set_to_none=True)
            synchronize(device)
            elapsed = (time.perf_counter() - started) * 1e3 / runs_per_pass
            if index >= warmup:
                times[slot].append(elapsed)
            bar.update()
    bar.close()
    return times


def validate(cost: CostModel, rounds: Sequence[ValidationRound], *, world_size: int, dtype: str = "fp32",
             warmup: int = 2, passes: int = 15, runs_per_pass: int = 3, statistic: str = "median", seed: int = 0,
             progress: bool = False, timeout_s: float = 900.0, nice: int | None = None) -> ValidationReport:
    """Run every round on a fresh gloo world of `world_size` CPU processes; compare with `cost`."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {list(STATISTICS)}, got {statistic!r}")
    if passes < 1 or warmup < 0 or runs_per_pass < 1:
        raise ValueError(f"passes and runs_per_pass must be >= 1 and warmup >= 0, got {passes}, {runs_per_pass} "
                         f"and {warmup}")
    _check_rounds(rounds, world_size, cost)
    started, load_before = time.perf_counter(), load_average()
    per_rank = run_world(_measure, world_size, cost.table.model, dtype, list(rounds), warmup, passes, runs_per_pass, seed,
                         progress, timeout_s=timeout_s, nice=nice)
    cases = []
    for index, r in enumerate(rounds):
        for group in r.groups:
            # A group's pass lasts as long as its slowest rank.
            slowest = np.max([per_rank[rank][index] for rank in group.ranks], axis=0)
            measured = summarize(slowest.tolist(), statistic)
            q1, q3 = np.percentile(slowest, [25, 75])
            predicted = float(cost.group_time_ms(cost.workload(list(group.lengths)), group.degree, group.algo))
            cases.append(CaseResult(index, group, predicted, measured, float((q3 - q1) / np.median(slowest))))
    return ValidationReport(tuple(cases), statistic, passes, time.perf_counter() - started, load_before,
                            load_average())


def _check_rounds(rounds: Sequence[ValidationRound], world_size: int, cost: CostModel) -> None:
    if not rounds:
        raise ValueError("validation needs at least one round")
    for index, r in enumerate(rounds):
        covered = sorted(rank for g in r.groups for rank in g.ranks)
        if covered != list(range(world_size)):
            raise ValueError(f"round {index}: groups cover ranks {covered}, expected each of 0..{world_size - 1} once")
        for group in r.groups:
            if group.algo not in cost.algos:
                raise ValueError(f"round {index}: algo {group.algo!r} is not one of the cost model's {cost.algos}")
            if group.algo == "ulysses" and not cost.ulysses_supported(group.degree):
                raise ValueError(f"round {index}: ulysses cannot split the heads over degree {group.degree}")
            if list(group.ranks) != list(range(group.ranks[0], group.ranks[0] + group.degree)):
                raise ValueError(f"round {index}: group ranks {list(group.ranks)} are not contiguous")
