"""Turns a Megatron-style training log into the ST result JSON.

Usage: python tests/st/test_tools/st_log.py TRAIN.log RESULT.json [--warm-up N]

Parsed lines (rank 0 writes the iteration lines, every rank its memory lines)::

    ... elapsed time per iteration (ms): 645.5 | ... lm loss: 6.246699E+00 | ...
    [Rank 3] (after 4 iterations) memory (MB) | allocated: 1.60 | max allocated: 1.60 | ...

The JSON has the keys of MindSpeed's ST baselines: `loss` and `time` (one value per logged iteration),
`memo info` (per rank, the last memory report: `rank`, `allocated memory`, `max allocated memory`)
and `warm_up` (leading iterations a time comparison would skip).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ITERATION_LINE = re.compile(
    r"elapsed time per iteration \(ms\):\s*(?P<time>[0-9.]+)\s*\|.*?\bloss:\s*(?P<loss>[-+0-9.Ee]+)\s*\|"
)
MEMORY_LINE = re.compile(
    r"\[Rank (?P<rank>\d+)\] \(after (?P<iterations>\d+) iterations\) memory \(MB\) \|"
    r"\s*allocated:\s*(?P<allocated>[0-9.]+)\s*\|\s*max allocated:\s*(?P<max_allocated>[0-9.]+)"
)
DEFAULT_WARM_UP = 1


class STLogError(ValueError):
    """The log lacks the lines the ST result needs."""


def parse_log(text: str, source: str = "<log>", warm_up: int = DEFAULT_WARM_UP) -> dict[str, Any]:
    """The ST result of one training log."""
    losses, times = [], []
    memory: dict[int, tuple[int, float, float]] = {}
    for line in text.splitlines():
        iteration = ITERATION_LINE.search(line)
        if iteration:
            times.append(float(iteration["time"]))
            losses.append(float(iteration["loss"]))
            continue
        report = MEMORY_LINE.search(line)
        if report:
            rank, after = int(report["rank"]), int(report["iterations"])
            if rank not in memory or after >= memory[rank][0]:
                memory[rank] = (after, float(report["allocated"]), float(report["max_allocated"]))
    if not losses:
        raise STLogError(f"{source}: no 'elapsed time per iteration (ms): ... loss: ...' lines")
    if not memory:
        raise STLogError(f"{source}: no '[Rank N] (after N iterations) memory (MB) | allocated: ...' lines")
    return {
        "loss": losses,
        "time": times,
        "memo info": [
            {"rank": rank, "allocated memory": allocated, "max allocated memory": max_allocated}
            for rank, (_, allocated, max_allocated) in sorted(memory.items())
        ],
        "warm_up": warm_up,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Megatron training log -> ST result JSON")
    parser.add_argument("log", type=Path)
    parser.add_argument("json", type=Path)
    parser.add_argument("--warm-up", type=int, default=DEFAULT_WARM_UP, help="iterations a time comparison skips")
    args = parser.parse_args(argv)
    result = parse_log(args.log.read_text(encoding="utf-8"), str(args.log), args.warm_up)
    args.json.write_text(json.dumps(result, indent=4) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
