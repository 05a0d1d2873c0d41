"""Profile the current device (optionally validating the result): spawn the world, build the table, write it.

Measurements run in sweeps: every sweep takes a few samples of every grid point. With
validation, passes of the validation rounds run between the sweeps, so the table and the group
executions it is checked against see the same host load, even when that load drifts during the
run (on a shared host it does, by tens of percent over minutes).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from mindspeed_mm.core.fcp.cost.model import CostModel
from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.core.fcp.profiler.profile_config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.environment import host_facts, load_average
from mindspeed_mm.core.fcp.profiler.measure import RankFacts, RankMeasurements, RankProfiler
from mindspeed_mm.core.fcp.profiler.memory import device_memory_bytes
from mindspeed_mm.core.fcp.profiler.table_builder import build_table
from mindspeed_mm.core.fcp.profiler.group_validation import (
    ValidationReport,
    ValidationRound,
    ValidationRunner,
    ValidationSettings,
    build_report,
    check_rounds,
)
from mindspeed_mm.core.fcp.profiler.vision import model_parallel_state
from mindspeed_mm.core.fcp.profiler.world import run_world

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValidationPlan:
    """Validation rounds run between the profile's sweeps."""

    rounds: tuple[ValidationRound, ...]
    """Rounds to run (each covers the world)."""
    settings: ValidationSettings
    """Passes, runs per pass, statistic."""


@dataclass(frozen=True)
class ProfileResult:
    """A measured table and, when asked for, its validation."""

    table: ProfileTable
    """The profile table."""
    report: ValidationReport | None
    """Predicted against measured group times (None without validation)."""
    measurements: tuple[RankMeasurements, ...]
    """Every rank's raw samples, in rank order (the table summarises them)."""
    validation_times: tuple[list[list[float]], ...] | None
    """Every rank's validation times per round and pass (None without validation)."""


def check_writable(path: Path) -> None:
    """Raise OSError now (not after minutes of profiling) if a table cannot be written to `path`."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OSError(f"{path}: is a directory, expected a file name for the profile table")
    if not parent.is_dir():
        raise OSError(f"{path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OSError(f"{path}: folder {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise OSError(f"{path}: existing file is not writable")


def _passes_per_sweep(passes: int, sweeps: int) -> list[int]:
    base, extra = divmod(passes, sweeps)
    return [base + (1 if index < extra else 0) for index in range(sweeps)]


def _profile_rank(rank: int, world_size: int, config: ProfileConfig, plan: ValidationPlan | None,
                  progress: bool) -> tuple[RankMeasurements, RankFacts, list[list[float]] | None]:
    """World function: the sweeps (and validation passes between them) of one rank."""
    with model_parallel_state() if config.encoder is not None else contextlib.nullcontext():
        return _measure_rank(rank, world_size, config, plan, progress)


def _measure_rank(rank: int, world_size: int, config: ProfileConfig, plan: ValidationPlan | None,
                  progress: bool) -> tuple[RankMeasurements, RankFacts, list[list[float]] | None]:
    profiler = RankProfiler(rank, world_size, config)
    runner = None
    if plan is not None:
        runner = ValidationRunner(rank, config.model, config.dtype, plan.rounds, profiler.pool, profiler.device,
                                  config.seed, config.clock)
    validation_steps = 0 if plan is None else plan.settings.passes
    bar = tqdm(total=config.sweeps * profiler.steps() + validation_steps + 1, desc="fcp profile", unit="step",
               file=sys.stderr, disable=not progress or rank != 0)

    def on_step(label: str) -> None:
        bar.set_postfix_str(label, refresh=False)
        bar.update()

    measurements = RankMeasurements()
    if runner is not None and plan is not None:
        runner.warm_up(plan.settings.warmup, plan.settings.window_ms)
    passes = _passes_per_sweep(validation_steps, config.sweeps)
    for sweep in range(config.sweeps):
        measurements = measurements + profiler.sweep(config.repeats, on_step)
        if runner is not None and plan is not None:
            runner.run(passes[sweep], on_pass=lambda: on_step("validation pass"))
    if runner is not None:
        profiler.phase_seconds["validation"] = runner.seconds
    facts = profiler.facts()
    on_step("memory")
    bar.close()
    return measurements, facts, None if runner is None else runner.times


def profile_device(config: ProfileConfig, *, validation: ValidationPlan | None = None,
                   progress: bool = False) -> ProfileResult:
    """Measure `config` on this host and return the table (and validation report); nothing is written."""
    if validation is not None:
        check_rounds(validation.rounds, config.world_size, config.model)
        if validation.settings.clock != config.clock:
            raise ValueError(f"the validation reads the {validation.settings.clock} clock but the profile the "
                             f"{config.clock} clock; they must match")
    started = time.perf_counter()
    load_before = load_average()
    per_rank = run_world(_profile_rank, config.world_size, config, validation, progress, backend=config.backend,
                         timeout_s=config.timeout_s, nice=config.nice)
    seconds = time.perf_counter() - started
    facts = host_facts(config.device)
    facts["load_average_before"] = load_before
    facts["rank_memory_bytes"] = device_memory_bytes(config.torch_device, config.ranks_per_node)
    facts["profile_seconds"] = round(seconds, 1)
    facts["validated_in_the_same_run"] = validation is not None
    table = build_table(config, [m for m, _, _ in per_rank], [f for _, f, _ in per_rank], facts)
    logger.info("profiled %s in %.1f s (load %s -> %s)", config.model.name, seconds, load_before,
                facts["load_average"])
    report, times = None, None
    if validation is not None:
        times = tuple(t for _, _, t in per_rank if t is not None)
        spent = per_rank[0][1].phase_seconds.get("validation", 0.0)
        report = build_report(CostModel(table), validation.rounds, times, validation.settings, spent, load_before)
    return ProfileResult(table, report, tuple(m for m, _, _ in per_rank), times)


def write_profile(config: ProfileConfig, path: Path, *, validation: ValidationPlan | None = None,
                  progress: bool = False) -> ProfileResult:
    """Profile and save the table to `path` atomically; an interrupted run leaves no file behind."""
    check_writable(path)
    result = profile_device(config, validation=validation, progress=progress)
    result.table.save(path)
    return result
