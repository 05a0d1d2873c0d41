"""Profile the current device: spawn the measurement world, build the table, write it atomically."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.core.fcp.profiler.config import ProfileConfig
from mindspeed_mm.core.fcp.profiler.environment import host_facts, load_average
from mindspeed_mm.core.fcp.profiler.measure import measure_rank
from mindspeed_mm.core.fcp.profiler.memory import device_memory_bytes
from mindspeed_mm.core.fcp.profiler.table_builder import build_table
from mindspeed_mm.core.fcp.profiler.world import run_world

logger = logging.getLogger(__name__)


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


def profile_device(config: ProfileConfig, *, progress: bool = False) -> ProfileTable:
    """Measure `config` on this host and return the table (nothing is written)."""
    started = time.perf_counter()
    load_before = load_average()
    ranks = run_world(measure_rank, config.world_size, config, progress, backend=config.backend,
                      timeout_s=config.timeout_s, nice=config.nice)
    facts = host_facts(config.device)
    facts["load_average_before"] = load_before
    facts["rank_memory_bytes"] = device_memory_bytes(config.torch_device, config.ranks_per_node)
    facts["profile_seconds"] = round(time.perf_counter() - started, 1)
    table = build_table(config, ranks, facts)
    logger.info("profiled %s in %.1f s (load %s -> %s)", config.model.name, facts["profile_seconds"], load_before,
                facts["load_average"])
    return table


def write_profile(config: ProfileConfig, path: Path, *, progress: bool = False) -> ProfileTable:
    """Profile and save the table to `path` atomically; an interrupted run leaves no file behind."""
    check_writable(path)
    table = profile_device(config, progress=progress)
    table.save(path)
    return table
