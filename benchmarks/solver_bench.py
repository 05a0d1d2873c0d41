"""Planner benchmark: solver time, plan / lower-bound ratio, and the gap to the exact optimum.

One run measures:
1. solver time (wall and CPU, p50 / p99) of `plan_batch` for 512 samples on 64 ranks and 4096 samples
   on 1024 ranks, with OpenVid / InternVid-like batches (vision patches included) on the Qwen3-VL-8B
   Atlas A3 preset, and the share of that time spent inside cost-model calls;
2. predicted step time / lower bound of those plans;
3. on random small instances (up to 10 samples, up to 8 ranks), the exact model's solve time and the
   planner's gap to the optimum, and whether the planner finds a plan whenever the optimum exists.

    python benchmarks/solver_bench.py            # full run
    python benchmarks/solver_bench.py --quick    # fewer batches and instances
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.workloads import generate_samples
from mindspeed_mm.core.fcp.solver import SolverConfig, plan_batch, solve_exact, validate_plan

logger = logging.getLogger("solver_bench")
PRESET = "a3-qwen3vl-8b"
TARGETS_MS = {(512, 64): 10.0, (4096, 1024): 100.0}


class CostTimer:
    """Accumulates the wall time the planner spends inside the cost model's time queries (by
    wrapping them on the instance while the benchmark runs)."""

    def __init__(self, cost: CostModel) -> None:
        self.seconds = 0.0
        for name in ("best_time_ms", "best_time_table"):
            method = getattr(cost, name, None)
            if method is not None:
                setattr(cost, name, self._timed(method))

    def _timed(self, method):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
        return timed


@dataclass
class ScaleResult:
    dataset: str
    samples: int
    ranks: int
    wall_ms: list[float]
    cpu_ms: list[float]
    cost_share: list[float]
    ratios: list[float]
    rounds: list[int]
    cost_calls: list[int]


def bench_scale(cost: CostModel, dataset: str, samples: int, ranks: int, batches: int) -> ScaleResult:
    result = ScaleResult(dataset, samples, ranks, [], [], [], [], [], [])
    config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node)
    timed = CostTimer(cost)
    for seed in tqdm(range(batches), desc=f"{dataset} {samples}x{ranks}", leave=False):
        batch = generate_samples(dataset, samples, seed=seed)
        lengths = batch.lengths.tolist()
        patches = batch.vision_patches.tolist()
        timed.seconds = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        plan = plan_batch(lengths, cost, config, patches=patches)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        validate_plan(plan, lengths, cost, patches=patches)
        result.wall_ms.append(wall * 1e3)
        result.cpu_ms.append(cpu * 1e3)
        result.cost_share.append(timed.seconds / wall)
        result.ratios.append(plan.predicted_ms / plan.lower_bound_ms)
        result.rounds.append(plan.num_rounds)
        result.cost_calls.append(int(plan.extras["cost_calls"]))
    return result


def small_instance(rng: np.random.Generator, cost: CostModel) -> tuple[list[int], SolverConfig]:
    """Up to 10 samples and 8 ranks; lengths log-normal around 0.4 x the per-rank capacity, so that
    memory, context parallelism and several rounds all occur; sometimes a degree or round cap."""
    n = int(rng.integers(1, 11))
    num_ranks = int(rng.integers(1, 9))
    capacity = cost.capacity_tokens
    lengths = np.clip(np.exp(rng.normal(np.log(capacity * 0.4), 1.0, size=n)).astype(int), 64,
                      capacity * num_ranks).tolist()
    need = -(-max(lengths) // capacity)
    max_degree = None if rng.random() < 0.8 else int(rng.integers(need, num_ranks + 1))
    max_rounds = None if rng.random() < 0.85 else int(rng.integers(1, 3))
    return lengths, SolverConfig(num_ranks, ranks_per_node=cost.ranks_per_node, max_degree=max_degree,
                                 max_rounds=max_rounds)


def bench_small(cost: CostModel, instances: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    exact_ms, plan_ms, gaps = [], [], []
    infeasible = missed = bound_violations = not_proven = 0
    for _ in tqdm(range(instances), desc="exact vs planner", leave=False):
        lengths, config = small_instance(rng, cost)
        exact = solve_exact(lengths, cost, config, time_limit_s=60)
        exact_ms.append(exact.solve_ms)
        if exact.status == "infeasible":
            infeasible += 1
            continue
        if exact.status != "optimal":
            not_proven += 1
            continue
        started = time.perf_counter()
        try:
            plan = plan_batch(lengths, cost, config)
        except ValueError:
            missed += 1
            continue
        plan_ms.append((time.perf_counter() - started) * 1e3)
        gaps.append(plan.predicted_ms / exact.objective_ms - 1)
        bound_violations += plan.lower_bound_ms > exact.objective_ms * (1 + 1e-9)
    return {"instances": instances, "optimal": len(gaps) + missed, "infeasible": infeasible,
            "not_proven": not_proven, "missed": missed, "gaps": np.array(gaps),
            "exact_ms": np.array(exact_ms), "plan_ms": np.array(plan_ms), "bound_violations": bound_violations}


def _pct(values, q) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer batches and instances")
    parser.add_argument("--small-instances", type=int, default=None, help="random small instances (default 200)")
    parser.add_argument("--seed", type=int, default=2024, help="seed of the small instances")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    cost = CostModel.from_preset(PRESET)
    batched = hasattr(cost, "best_time_table")
    exact_cost = CostModel.from_preset(PRESET)  # not wrapped by the timer
    small_count = args.small_instances or (40 if args.quick else 200)
    scales = [(512, 64, 10 if args.quick else 50), (4096, 1024, 3 if args.quick else 10)]
    load = os.getloadavg()[0]
    print(f"preset {PRESET}: capacity {cost.capacity_tokens} tokens/rank, {cost.ranks_per_node} ranks/node; "
          f"cost queries {'batched' if batched else 'one call per workload'}; "
          f"{os.cpu_count()} CPUs, load average {load:.1f} at start")

    print("\n1-2. plan_batch on OpenVid / InternVid-like batches (vision patches included)")
    header = (f"{'dataset':<10} {'batch':>10} {'n':>3} {'wall p50':>9} {'wall p99':>9} {'cpu p50':>8} "
              f"{'target':>7} {'cost %':>6} {'calls':>6} {'R':>5} {'plan/LB mean':>12} {'max':>6}")
    print(header)
    print("-" * len(header))
    for samples, ranks, batches in scales:
        for dataset in ("openvid", "internvid"):
            r = bench_scale(cost, dataset, samples, ranks, batches)
            target = TARGETS_MS[(samples, ranks)]
            print(f"{dataset:<10} {f'{samples}x{ranks}':>10} {batches:>3} {_pct(r.wall_ms, 50):>8.1f}ms "
                  f"{_pct(r.wall_ms, 99):>7.1f}ms {_pct(r.cpu_ms, 50):>6.1f}ms {target:>5.0f}ms "
                  f"{100 * np.mean(r.cost_share):>5.0f}% {int(np.mean(r.cost_calls)):>6} "
                  f"{min(r.rounds)}-{max(r.rounds):<3} {np.mean(r.ratios):>12.3f} {max(r.ratios):>6.3f}")

    print(f"\n3. exact optimum vs planner on {small_count} random instances (<= 10 samples, <= 8 ranks)")
    s = bench_small(exact_cost, small_count, args.seed)
    gaps = s["gaps"]
    print(f"optimal: {s['optimal']}, infeasible (no plan exists): {s['infeasible']}, not proven in the time "
          f"limit: {s['not_proven']}")
    print(f"planner found no plan where the optimum exists: {s['missed']}")
    print(f"gap to the optimum: mean {100 * gaps.mean():.2f}%, p50 {100 * _pct(gaps, 50):.2f}%, "
          f"p99 {100 * _pct(gaps, 99):.2f}%, max {100 * gaps.max():.2f}%, "
          f"within 1%: {np.mean(gaps <= 0.01):.0%}, exactly optimal: {np.mean(gaps <= 1e-9):.0%}")
    print(f"exact solve time: mean {s['exact_ms'].mean():.0f} ms, p50 {_pct(s['exact_ms'], 50):.0f} ms, "
          f"p99 {_pct(s['exact_ms'], 99):.0f} ms, max {s['exact_ms'].max():.0f} ms")
    print(f"planner time on the same instances: mean {s['plan_ms'].mean():.1f} ms, "
          f"p99 {_pct(s['plan_ms'], 99):.1f} ms")
    print(f"lower bound above the optimum (must be 0): {s['bound_violations']}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
