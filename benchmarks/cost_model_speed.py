"""Speed of the cost-model calls the planner makes most (Qwen3-VL-8B on the Atlas A3 preset).

- `best_time_ms`: one group of 51 documents (50 x 3,000 + 60,000 tokens) at every degree 1..1,024;
- `best_time_table`: 1,000 workloads of 500..30,000 tokens at degrees 1..64 (64,000 entries).
CPU time (process time: other processes on shared cores do not count), the fastest of `--repeats`
blocks of calls after one warm-up call.

    python benchmarks/cost_model_speed.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel


def fastest_ms(run: Callable[[], object], calls: int, repeats: int) -> float:
    """CPU milliseconds per call: the fastest of `repeats` blocks of `calls` calls, after a warm-up."""
    run()
    blocks = []
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(calls):
            run()
        blocks.append((time.process_time() - started) * 1e3 / calls)
    return min(blocks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed blocks per call kind (default 5)")
    args = parser.parse_args(argv)
    cost = CostModel.from_preset("a3-qwen3vl-8b")
    work = cost.workload([3000] * 50 + [60000])
    degrees = np.arange(1, 1025)
    group_ms = fastest_ms(lambda: cost.best_time_ms(work, degrees), calls=200, repeats=args.repeats)
    rng = np.random.default_rng(5)
    columns = cost.workload_columns(rng.integers(500, 30000, size=1000).tolist())
    table_degrees = np.arange(1, 65)[None, :] + np.zeros((1000, 1), dtype=np.int64)
    table_ms = fastest_ms(lambda: cost.best_time_table(columns, table_degrees), calls=5, repeats=args.repeats)
    print(f"best_time_ms, one group at 1,024 degrees: {group_ms:.3f} ms CPU per call")
    print(f"best_time_table, 1,000 workloads x 64 degrees: {table_ms:.2f} ms CPU per call "
          f"({1e3 * table_ms / 64000:.3f} us per entry)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
