"""Checks, before training, that every rank runs the same effective configuration.

Plans are compared every step, but a rank with another learning rate, seed or model width plans the
same layouts and trains silently wrong. At start every rank all-gathers a digest of its whole
effective configuration (the YAML after command-line overrides, the world size and the contents of
a profile table); when they differ, every rank gathers the others' settings and stops with the same
error naming the keys that differ. The same exchange carries a start-up problem of rank 0 (its
output folder), so that all ranks stop together instead of waiting for rank 0 in the first step.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import torch.distributed as dist

from mindspeed_mm.core.fcp.sandbox.run_config import RunConfig

_MAX_SHOWN = 8


class ConfigMismatchError(ValueError):
    """Ranks were started with different effective configurations; the message names the differing keys."""


class StartupError(ValueError):
    """Rank 0 could not prepare the run (e.g. its output folder); every rank raises it."""


def effective_config(config: RunConfig, world_size: int) -> dict[str, Any]:
    """Every setting of the run as dotted keys (`optimizer.lr`, `fcp.comm_timeout_s`, ...), JSON-ready.

    `source` (where the file was read) is left out: ranks may read the same settings from
    different paths. A profile table enters by the sha256 of its contents.
    """
    items: dict[str, Any] = {"world_size": world_size}

    def flatten(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                flatten(f"{prefix}.{key}" if prefix else key, inner)
        else:
            items[prefix] = value

    flatten("", {k: v for k, v in dataclasses.asdict(config).items() if k != "source"})
    table = config.fcp.profile_table
    if table is not None:
        try:
            items["fcp.profile_table_sha256"] = hashlib.sha256(Path(table).read_bytes()).hexdigest()
        except OSError:
            items["fcp.profile_table_sha256"] = None  # unreadable: the cost model reports it by name
    return items


def config_digest(items: dict[str, Any]) -> str:
    """sha256 of the settings, independent of key order."""
    return hashlib.sha256(json.dumps(items, sort_keys=True, default=repr).encode("utf-8")).hexdigest()


def differing_keys(per_rank: list[dict[str, Any]]) -> list[str]:
    """Keys whose value (or presence) is not the same on every rank, sorted."""
    keys = sorted(set().union(*per_rank))
    missing = object()
    return [k for k in keys if len({json.dumps(r.get(k, missing), default=repr) for r in per_rank}) > 1]


def describe_mismatch(per_rank: list[dict[str, Any]]) -> str:
    """The differing keys with each rank's value (grouped by value)."""
    parts = []
    keys = differing_keys(per_rank)
    for key in keys[:_MAX_SHOWN]:
        by_value: dict[str, list[int]] = {}
        for rank, items in enumerate(per_rank):
            shown = repr(items[key]) if key in items else "<unset>"
            by_value.setdefault(shown, []).append(rank)
        values = "; ".join(f"ranks {ranks}: {value}" for value, ranks in by_value.items())
        parts.append(f"{key} ({values})")
    more = f", and {len(keys) - _MAX_SHOWN} more" if len(keys) > _MAX_SHOWN else ""
    return ", ".join(parts) + more


def check_run_agreement(items: dict[str, Any], startup_problem: str | None = None,
                        group: dist.ProcessGroup | None = None) -> None:
    """Every rank calls this once before training; raises the same error on every rank when rank 0
    reported `startup_problem` (`StartupError`) or the ranks' settings differ (`ConfigMismatchError`)."""
    world = dist.get_world_size(group)
    mine = {"digest": config_digest(items), "problem": startup_problem}
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine, group=group)
    problem = gathered[0]["problem"]
    if problem is not None:
        raise StartupError(f"rank 0 cannot start the run: {problem}")
    if len({entry["digest"] for entry in gathered}) == 1:
        return
    per_rank: list[Any] = [None] * world
    dist.all_gather_object(per_rank, items, group=group)
    raise ConfigMismatchError(
        "ranks were started with different configurations (every rank must read the same YAML and options): "
        + describe_mismatch(per_rank)
    )
