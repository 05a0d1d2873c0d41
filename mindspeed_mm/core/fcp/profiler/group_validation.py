"""Cost-model validation: real group executions on this host against the cost model's predictions.

Beside the group runs, `held_out_validation` scores the table's own terms on points their fits did not see
(`cost.term_validation`) and prices the same group runs with the table cut before its largest measured sizes:
how far the table's fits carry beyond what was measured.

Each validation round splits the world into groups (degree, algo) that run at the same time, as
in a training round; each group trains a packed batch of mixed lengths forward and backward
through the profiler's decoder (the same code the profile timed: torch projections, MLP, norms
and ``fcp_attention`` over the group). In one pass every group repeats its run for about the same
window, so all ranks stay busy as in a training round; the group's time in the pass is the mean
run of its slowest rank. Passes go round-robin over the rounds so that slow drifts of the host
load hit every case alike.
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from mindspeed_mm.core.fcp.cost.model import ALGOS, CostModel
from mindspeed_mm.core.fcp.cost.table import ModelShape, ProfileTable
from mindspeed_mm.core.fcp.cost.term_validation import (
    HeldOutTerm, lines as held_out_lines, table_held_out, ulysses_rule_errors, without_largest_sizes,
)
from mindspeed_mm.core.fcp.cost.ulysses_costs import ulysses_degrees
from mindspeed_mm.core.fcp.parallel import CommGroupPool
from mindspeed_mm.core.fcp.profiler.probe_batch import cu_seqlens_of, shard_inputs
from mindspeed_mm.core.fcp.profiler.decoder import AttentionCore, Decoder, ShardInputs, fcp_core
from mindspeed_mm.core.fcp.profiler.environment import load_average
from mindspeed_mm.core.fcp.parallel.device import synchronize
from mindspeed_mm.core.fcp.profiler.timing import CLOCKS, STATISTICS, check_clock, summarize
from mindspeed_mm.core.fcp.profiler.world import run_world
from mindspeed_mm.core.fcp.simulate.workloads import generate, scale_lengths

VALIDATED_ALGOS = ("ring", "ulysses")
"""The algos whose groups `fcp profile --validate` times (a hybrid group needs its block and ring groups)."""

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
    samples_ms: tuple[float, ...]
    """The group's time in every pass."""

    @property
    def spread(self) -> float:
        """Interquartile range of the passes over their median: how noisy the measurement was."""
        q1, median, q3 = np.percentile(self.samples_ms, [25, 50, 75])
        return float((q3 - q1) / median)

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
    clock: str
    """Clock the times were read on."""
    passes: int
    """Timed passes per round."""
    seconds: float
    """Elapsed time of the validation passes (warm-up included)."""
    load_before: tuple[float, float, float] | None
    """Host load averages when the run started."""
    load_after: tuple[float, float, float] | None
    """Host load averages when it ended."""

    @property
    def mape(self) -> float:
        """Mean absolute percentage error over the cases."""
        return float(100.0 * np.mean([abs(c.error) for c in self.cases]))

    def repriced(self, cost: CostModel) -> "ValidationReport":
        """The same measurements against `cost`'s predictions (e.g. its table without one of its terms)."""
        return dataclasses.replace(self, cases=tuple(
            dataclasses.replace(c, predicted_ms=_predicted_ms(cost, c.group)) for c in self.cases))

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON document (every case with its passes)."""
        return {
            "mape_percent": self.mape, "target_percent": TARGET_MAPE_PERCENT, "statistic": self.statistic,
            "clock": self.clock, "passes": self.passes, "seconds": self.seconds,
            "load_average_before": self.load_before, "load_average_after": self.load_after,
            "cases": [{"round": c.round_index, "ranks": list(c.group.ranks), "degree": c.group.degree,
                       "algo": c.group.algo if c.group.degree > 1 else "local", "lengths": list(c.group.lengths),
                       "predicted_ms": c.predicted_ms, "measured_ms": c.measured_ms,
                       "error_percent": 100 * c.error, "spread": c.spread, "samples_ms": list(c.samples_ms)}
                      for c in self.cases],
        }

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
                   f"{self.statistic} of {self.passes} passes on the {self.clock} clock, {self.seconds:.0f} s, "
                   f"load average {_load(self.load_before)} -> {_load(self.load_after)}")
        return out


@dataclass(frozen=True)
class HeldOutValidation:
    """A table's fits scored on what they did not see: its terms point by point, and the group runs priced by
    the table cut before its largest sizes."""

    terms: tuple[HeldOutTerm, ...]
    """Every measured grid of the table: in sample, leave one out, largest size from the smaller."""
    ulysses_rule_mean: float | None
    """Mean |error| of the full heads / d rule against the table's measured Ulysses grids (None: none measured)."""
    full_table_mape: float
    """The group runs' MAPE (%) against the whole table."""
    small_table_mape: float
    """The same runs' MAPE (%) against the table without its largest sizes."""

    def lines(self) -> list[str]:
        """The term scores (Markdown) and the two MAPEs, as text lines."""
        out = ["held out: every measured grid point predicted by the grid without it (and the largest size by the "
               "smaller ones)", *held_out_lines(self.terms, "points")]
        if self.ulysses_rule_mean is not None:
            out.append(f"Ulysses grids against the full heads' attention / d: {100 * self.ulysses_rule_mean:.1f}% mean")
        out.append(f"group runs: MAPE {self.full_table_mape:.1f}% with the whole table, {self.small_table_mape:.1f}% "
                   "with the table cut before its largest sizes")
        return out

    def to_json(self) -> dict[str, Any]:
        """The scores as a JSON document."""
        def term(t: HeldOutTerm) -> dict[str, Any]:
            return {"term": t.term, "in_sample_mean": t.in_sample.mean_abs_error,
                    "leave_one_out_mean": t.held_out_mean, "held_out_worst": t.held_out_worst,
                    "largest_from_smaller": None if t.small_to_large is None else t.small_to_large.mean_abs_error,
                    "meets_goal": t.meets_goal}

        return {"terms": [term(t) for t in self.terms], "ulysses_rule_mean": self.ulysses_rule_mean,
                "full_table_mape_percent": self.full_table_mape, "small_table_mape_percent": self.small_table_mape}


def held_out_validation(table: ProfileTable, report: ValidationReport) -> HeldOutValidation:
    """The held-out scores of `table` and its validation `report` (see `HeldOutValidation`)."""
    rule = ulysses_rule_errors(table)
    small = report.repriced(CostModel(without_largest_sizes(table)))
    return HeldOutValidation(tuple(table_held_out(table)), None if rule is None else rule.mean_abs_error,
                             report.mape, small.mape)


def _load(load: tuple[float, float, float] | None) -> str:
    return "n/a" if load is None else "/".join(f"{x:.1f}" for x in load)


def default_rounds(world_size: int, shape: ModelShape, *, seed: int = 0, tokens_per_rank: Sequence[int] = (128, 384),
                   length_scale: float = 64.0, min_length: int = 8) -> list[ValidationRound]:
    """Rounds covering degrees 1..world_size with ring and Ulysses (where the model's heads allow it).

    Every layout runs once per entry of `tokens_per_rank`. Batches are openvid lengths scaled down
    for CPU (as the tiny training configs do), packed until every group holds that many tokens per
    rank, so the groups of a round carry equal load.
    """
    if world_size < 2:
        raise ValueError(f"validation needs a world of at least 2 ranks, got {world_size}")
    pool = iter(scale_lengths(generate("openvid", 4096, seed), length_scale, min_length).tolist())
    ulysses = [d for d in ulysses_degrees(shape.heads, shape.kv_heads) if 2 <= d <= world_size]
    layouts: list[list[tuple[int, str]]] = []
    for d in range(world_size, 1, -1):
        rest = [(1, "ring")] * (world_size % d)
        layouts.append([(d, "ring")] * (world_size // d) + rest)
        if d in ulysses:
            layouts.append([(d, "ulysses")] * (world_size // d) + rest)
    layouts.append([(1, "ring")] * world_size)
    if 2 in ulysses and world_size >= 4:
        mixed = [(2, "ring" if index % 2 == 0 else "ulysses") for index in range(world_size // 2)]
        layouts.append(mixed + [(1, "ring")] * (world_size % 2))
    rounds = []
    for budget in tokens_per_rank:
        for layout in layouts:
            first, groups = 0, []
            for degree, algo in layout:
                lengths = _pack(pool, budget * degree)
                groups.append(ValidationGroup(tuple(range(first, first + degree)), algo, lengths))
                first += degree
            rounds.append(ValidationRound(tuple(groups)))
    return rounds


def _pack(pool: Iterator[int], tokens: int) -> tuple[int, ...]:
    """Take lengths from the pool until `tokens`; the last one is cut so the batch holds exactly `tokens`."""
    lengths: list[int] = []
    while sum(lengths) < tokens:
        lengths.append(min(int(next(pool)), tokens - sum(lengths)))
    return tuple(lengths)


@dataclass(frozen=True)
class ValidationSettings:
    """How the validation repeats its rounds."""

    passes: int = 15
    """Timed passes over all rounds."""
    window_ms: float = 300.0
    """Each group repeats its run back to back for about this long per pass (a pass reports the mean run)."""
    warmup: int = 1
    """Untimed passes first (the last one sizes the windows)."""
    statistic: str = "median"
    """How passes are summarised: one of STATISTICS."""
    clock: str = "cpu"
    """Clock of the measured times: the profile's (see `timing.CLOCKS`)."""

    def __post_init__(self) -> None:
        for option, value, low in (("--validation-passes", self.passes, 1), ("warmup", self.warmup, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{option} must be an int >= {low}, got {value!r}")
        if isinstance(self.window_ms, bool) or not isinstance(self.window_ms, (int, float)) or not self.window_ms > 0:
            raise ValueError(f"--validation-window-ms must be a number > 0, got {self.window_ms!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {list(STATISTICS)}, got {self.statistic!r}")
        check_clock(self.clock, "cpu")


class ValidationRunner:
    """One rank's side of the validation: its group of every round, ready to run pass after pass."""

    def __init__(self, rank: int, shape: ModelShape, dtype: str, rounds: Sequence[ValidationRound],
                 pool: CommGroupPool, device: torch.device, seed: int, clock: str) -> None:
        pool.prewarm([g.ranks for r in rounds for g in r.groups if g.degree > 1])
        causal = shape.attention_mask == "causal"
        self.device = device
        self.now = CLOCKS[clock]
        self.model = Decoder(shape, dtype, seed).to(device)
        self.work: list[tuple[ShardInputs, AttentionCore]] = []
        self.group_ranks: list[tuple[int, ...]] = []
        """Per round, the ranks of this rank's group."""
        self.runs: list[int] = [1] * len(rounds)
        """Per round, back-to-back runs of a timed pass (set by `warm_up`)."""
        for r in rounds:
            group = next(g for g in r.groups if rank in g.ranks)
            self.group_ranks.append(group.ranks)
            process_group = pool.get(group.ranks) if group.degree > 1 else None
            inputs = shard_inputs(list(group.lengths), shape.vocab, group.ranks.index(rank), group.degree,
                                  seed=seed, device=device)
            self.work.append((inputs, fcp_core(cu_seqlens_of(group.lengths), process_group, group.algo, causal)))
        self.times: list[list[float]] = [[] for _ in rounds]
        """Per round, this rank's time of every timed pass (ms per run)."""
        self.seconds = 0.0
        """Elapsed time spent in warm-up and timed passes."""

    def warm_up(self, passes: int, window_ms: float) -> None:
        """Untimed passes; then size every round's runs so that each group stays busy about `window_ms` (elapsed).

        Every rank keeps working for the whole window, as in a training round where all ranks
        work: a group that finished early would leave its cores to the others and speed them up.
        A group's run count comes from its slowest rank's warm-up time (all ranks agree on it).
        """
        begun = time.perf_counter()
        last = [0.0] * len(self.work)
        for _ in range(passes):
            for slot, (inputs, core) in enumerate(self.work):
                dist.barrier()
                started = time.perf_counter()
                self._run_once(inputs, core)
                last[slot] = (time.perf_counter() - started) * 1e3
        gathered = [torch.zeros(len(self.work), dtype=torch.float64) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, torch.tensor(last, dtype=torch.float64))
        per_rank = torch.stack(gathered)
        self.runs = [max(1, math.ceil(window_ms / float(per_rank[list(ranks), slot].max())))
                     for slot, ranks in enumerate(self.group_ranks)]
        self.seconds += time.perf_counter() - begun

    def run(self, passes: int, *, on_pass: Callable[[], None] | None = None) -> None:
        """`passes` timed passes over all rounds (after `warm_up`)."""
        begun = time.perf_counter()
        for _ in range(passes):
            for slot, (inputs, core) in enumerate(self.work):
                dist.barrier()
                started = self.now()
                for _ in range(self.runs[slot]):
                    self._run_once(inputs, core)
                synchronize(self.device)
                self.times[slot].append((self.now() - started) * 1e3 / self.runs[slot])
            if on_pass is not None:
                on_pass()
        self.seconds += time.perf_counter() - begun

    def _run_once(self, inputs: ShardInputs, core: AttentionCore) -> None:
        self.model(inputs, core).backward()
        self.model.zero_grad(set_to_none=True)


def _validation_rank(rank: int, world_size: int, shape: ModelShape, dtype: str, rounds: Sequence[ValidationRound],
                     settings: ValidationSettings, seed: int, progress: bool) -> list[list[float]]:
    """World function of a standalone validation: this rank's pass times per round."""
    runner = ValidationRunner(rank, shape, dtype, rounds, CommGroupPool(), torch.device("cpu"), seed, settings.clock)
    bar = tqdm(total=settings.passes, desc="fcp validate", unit="pass", file=sys.stderr,
               disable=not progress or rank != 0)
    runner.warm_up(settings.warmup, settings.window_ms)
    runner.run(settings.passes, on_pass=bar.update)
    bar.close()
    return runner.times


def build_report(cost: CostModel, rounds: Sequence[ValidationRound], per_rank: Sequence[Sequence[Sequence[float]]],
                 settings: ValidationSettings, seconds: float, load_before: tuple[float, float, float] | None,
                 ) -> ValidationReport:
    """Compare every group's measured passes (its slowest rank per pass) with the cost model."""
    cases = []
    for index, r in enumerate(rounds):
        for group in r.groups:
            slowest = np.max([per_rank[rank][index] for rank in group.ranks], axis=0)
            cases.append(CaseResult(index, group, _predicted_ms(cost, group), summarize(slowest.tolist(), settings.statistic),
                                    tuple(slowest.tolist())))
    return ValidationReport(tuple(cases), settings.statistic, settings.clock, settings.passes, seconds, load_before,
                            load_average())


def _predicted_ms(cost: CostModel, group: ValidationGroup) -> float:
    return float(cost.group_time_ms(cost.workload(list(group.lengths)), group.degree, group.algo))


def validate(cost: CostModel, rounds: Sequence[ValidationRound], *, world_size: int,
             settings: ValidationSettings = ValidationSettings(), dtype: str = "fp32", seed: int = 0,
             progress: bool = False, timeout_s: float = 900.0, nice: int | None = None) -> ValidationReport:
    """Run every round on a fresh gloo world of `world_size` CPU processes; compare with `cost`.

    The table behind `cost` was measured earlier: if the host's load changed since, so did its
    speed (`fcp profile --validate` interleaves both to avoid that).
    """
    check_rounds(rounds, world_size, cost.table.model)
    started, load_before = time.perf_counter(), load_average()
    per_rank = run_world(_validation_rank, world_size, cost.table.model, dtype, list(rounds), settings, seed,
                         progress, timeout_s=timeout_s, nice=nice)
    return build_report(cost, rounds, per_rank, settings, time.perf_counter() - started, load_before)


def check_rounds(rounds: Sequence[ValidationRound], world_size: int, shape: ModelShape) -> None:
    """Raise ValueError unless every round covers the world with contiguous groups that can run."""
    if not rounds:
        raise ValueError("validation needs at least one round")
    supported = ulysses_degrees(shape.heads, shape.kv_heads)
    for index, r in enumerate(rounds):
        covered = sorted(rank for g in r.groups for rank in g.ranks)
        if covered != list(range(world_size)):
            raise ValueError(f"round {index}: groups cover ranks {covered}, expected each of 0..{world_size - 1} once")
        for group in r.groups:
            if group.algo not in ALGOS:
                raise ValueError(f"round {index}: unknown algo {group.algo!r}; valid: {list(ALGOS)}")
            if group.algo not in VALIDATED_ALGOS:
                raise ValueError(f"round {index}: validation times ring and ulysses groups, not {group.algo!r} ones")
            if group.algo == "ulysses" and group.degree not in supported:
                raise ValueError(f"round {index}: ulysses cannot split {shape.heads} heads ({shape.kv_heads} kv heads) "
                                 f"over degree {group.degree}")
            if list(group.ranks) != list(range(group.ranks[0], group.ranks[0] + group.degree)):
                raise ValueError(f"round {index}: group ranks {list(group.ranks)} are not contiguous")
            if not group.lengths or any(length <= 0 for length in group.lengths):
                raise ValueError(f"round {index}: group {list(group.ranks)} needs positive document lengths, "
                                 f"got {list(group.lengths)}")
