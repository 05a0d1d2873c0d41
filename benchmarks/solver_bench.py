"""Planner benchmark: solver time, plan quality against the lower bound, the exact optimum and the baselines.

One run measures:
1. solver time of `plan_batch`, CPU (process time: other processes on shared cores do not count) and
   wall, p50 / p95 / p99 over the batches of each batch's fastest of `--repeats` plannings (default 3: a
   shared host's other tenants only ever add time; the repeats must give the same plan), for 512 samples on 64 ranks and 4096 samples on 1024 ranks, with OpenVid /
   InternVid / MSR-VTT-like batches and the bimodal and image+video mixes (vision patches included)
   on the Qwen3-VL-8B Atlas A3 preset, the share of
   that time spent inside cost-model calls, the mean number of those calls (the memory-limited model
   and its memory-free copy together), and predicted step time / lower bound of those plans;
2. on the same batches, FCP's predicted step time against every baseline strategy (static degrees
   fixed for the run from its longest sample, as a static launch would be);
3. on random small instances (up to 10 samples, up to 8 ranks), the exact model's solve time and the
   planner's gap to the optimum, and whether the planner finds a plan whenever the optimum exists.

    python benchmarks/solver_bench.py            # full run
    python benchmarks/solver_bench.py --quick    # fewer batches and instances
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig, plan_batch, solve_exact, validate_plan
from mindspeed_mm.core.fcp.solver.baselines import BASELINES, BaselineInfeasibleError, static_cp_degree
from mindspeed_mm.core.fcp.solver.plan import LOCKSTEP, STEP_SEMANTICS

logger = logging.getLogger("solver_bench")
PRESET = "a3-qwen3vl-8b"
TARGETS_MS = {(512, 64): 10.0, (4096, 1024): 100.0}
DATASETS = ("openvid", "internvid", "msrvtt", "bimodal", "imagevideo")


class CostTimer:
    """Accumulates the CPU time the planner spends inside the cost model's time queries (by
    wrapping them on the instance, and on its memory-free copy, while the benchmark runs)."""

    def __init__(self, cost: CostModel) -> None:
        self.seconds = 0.0
        for model in (cost, cost.without_memory_limit()):
            for name in ("best_time_ms", "best_time_table"):
                method = getattr(model, name, None)
                if method is not None:
                    setattr(model, name, self._timed(method))

    def _timed(self, method):
        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - started
        return timed


@dataclass
class ScaleResult:
    dataset: str
    samples: int
    ranks: int
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    cost_share: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    cost_calls: list[int] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    batches: list[tuple[list[int], list[int]]] = field(default_factory=list)


def bench_scale(cost: CostModel, dataset: str, samples: int, ranks: int, batches: int,
                semantics: str = LOCKSTEP, repeats: int = 1) -> ScaleResult:
    """Plans each batch `repeats` times and keeps its fastest CPU and wall time (other tenants of a
    shared host only ever add time); every repeat must give the same plan."""
    result = ScaleResult(dataset, samples, ranks)
    config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node, step_semantics=semantics)
    timed = CostTimer(cost)
    warm_lengths, warm_patches = draw_lengths(dataset, samples, seed=10_000)
    plan_batch(warm_lengths.tolist(), cost, config, patches=warm_patches.tolist())  # first-call set-up
    for seed in tqdm(range(batches), desc=f"{dataset} {samples}x{ranks}", leave=False):
        batch_lengths, batch_patches = draw_lengths(dataset, samples, seed=seed)
        lengths = batch_lengths.tolist()
        patches = batch_patches.tolist()
        fastest_wall = fastest_cpu = share = float("inf")
        plan = None
        for _ in range(repeats):
            timed.seconds = 0.0
            wall, cpu = time.perf_counter(), time.process_time()
            again = plan_batch(lengths, cost, config, patches=patches)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if plan is not None and again.digest() != plan.digest():
                raise RuntimeError(f"{dataset} batch {seed}: planning the same batch twice gave two plans")
            plan = again
            fastest_wall = min(fastest_wall, wall)
            if cpu < fastest_cpu:
                fastest_cpu, share = cpu, timed.seconds / cpu if cpu > 0 else 0.0
        assert plan is not None
        validate_plan(plan, lengths, cost, patches=patches, priced=True)
        result.wall_ms.append(fastest_wall * 1e3)
        result.cpu_ms.append(fastest_cpu * 1e3)
        result.cost_share.append(share)
        result.ratios.append(plan.predicted_ms / plan.lower_bound_ms)
        result.rounds.append(plan.num_rounds)
        result.cost_calls.append(int(plan.extras["cost_calls"]))
        result.plans.append(plan)
        result.batches.append((lengths, patches))
    return result


def speedups_over_baselines(cost: CostModel, result: ScaleResult) -> dict[str, float | str]:
    """Per baseline: its total predicted step time over FCP's on the same batches (> 1: FCP faster),
    or why it cannot run them."""
    config = SolverConfig(result.ranks, ranks_per_node=cost.ranks_per_node)
    fcp_total = sum(plan.predicted_ms for plan in result.plans)
    out: dict[str, float | str] = {}
    for name, baseline in BASELINES.items():
        try:
            degree = None
            if baseline.static_algo is not None:
                longest = max(max(lengths) for lengths, _ in result.batches)
                degree = static_cp_degree(longest, cost, config, baseline.static_algo)
            total = 0.0
            for lengths, patches in result.batches:
                if degree is None:
                    plan = baseline.planner(lengths, cost, config, patches)
                else:
                    plan = baseline.planner(lengths, cost, config, patches, cp_degree=degree)
                total += plan.predicted_ms
            out[name] = total / fcp_total
        except BaselineInfeasibleError as err:
            out[name] = f"n/a ({err})"
    return out


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
        started = time.process_time()
        try:
            plan = plan_batch(lengths, cost, config)
        except ValueError:
            missed += 1
            continue
        plan_ms.append((time.process_time() - started) * 1e3)
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
    parser.add_argument("--preset", default=PRESET, help=f"cost preset of parts 1 and 2 (default {PRESET})")
    parser.add_argument("--small-instances", type=int, default=None, help="random small instances (default 200)")
    parser.add_argument("--seed", type=int, default=2024, help="seed of the small instances")
    parser.add_argument("--repeats", type=int, default=3,
                        help="plannings of each batch in part 1, the fastest kept (default 3)")
    parser.add_argument("--step-semantics", choices=STEP_SEMANTICS, default=LOCKSTEP,
                        help="plan part 1 for lockstep rounds (FSDP, default) or independent groups (DDP)")
    parser.add_argument("--parts", default="1,2,3",
                        help="parts to run (default 1,2,3); part 1 always runs, part 2 compares its plans")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    parts = {int(p) for p in args.parts.split(",")}
    if 2 in parts and args.step_semantics != LOCKSTEP:
        parser.error("part 2 compares lockstep round times: run it with --step-semantics lockstep")
    logging.basicConfig(level=logging.WARNING)

    # The scales' presets shard the model state over the scale's ranks (the run's memory limit); the small
    # instances are synthetic, their lengths drawn relative to the capacity of the default preset (state
    # sharded over one node), so its sharding does not matter there and its warning is not shown.
    logging.getLogger("mindspeed_mm.core.fcp.solver.memory_checks").setLevel(logging.ERROR)
    # The exact model minimises the sum of the rounds' makespans: the planner is asked for the same (no step costs,
    # so no FSDP floor per round).
    preset = CostModel.from_preset(args.preset)
    exact_cost = CostModel(dataclasses.replace(preset.table, step=None))
    small_count = args.small_instances or (40 if args.quick else 200)
    scales = [(512, 64, 10 if args.quick else 50), (4096, 1024, 3 if args.quick else 10)]
    costs = {ranks: CostModel.from_preset(args.preset, shard_ranks=ranks) for _, ranks, _ in scales}
    print(f"preset {args.preset}: capacity " + ", ".join(f"{c.capacity_tokens} tokens/rank at {r} ranks"
                                                   for r, c in costs.items())
          + f" (state sharded over the ranks), {exact_cost.ranks_per_node} ranks/node; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")

    print(f"\n1. plan_batch ({args.step_semantics} step semantics) on OpenVid / InternVid-like batches (vision "
          f"patches included); times in ms, CPU = process time, each batch's fastest of {args.repeats} plannings")
    header = (f"{'dataset':<10} {'batch':>10} {'n':>3} {'cpu p50':>8} {'cpu p95':>8} {'cpu p99':>8} {'wall p50':>8} "
              f"{'wall p99':>8} {'target':>6} {'cost %':>6} {'calls':>5} {'R':>5} {'plan/LB':>7} {'max':>6}")
    print(header)
    print("-" * len(header))
    results = []
    for samples, ranks, batches in scales:
        for dataset in DATASETS:
            r = bench_scale(costs[ranks], dataset, samples, ranks, batches, args.step_semantics, args.repeats)
            results.append(r)
            target = TARGETS_MS[(samples, ranks)]
            print(f"{dataset:<10} {f'{samples}x{ranks}':>10} {batches:>3} {_pct(r.cpu_ms, 50):>8.1f} "
                  f"{_pct(r.cpu_ms, 95):>8.1f} {_pct(r.cpu_ms, 99):>8.1f} {_pct(r.wall_ms, 50):>8.1f} {_pct(r.wall_ms, 99):>8.1f} "
                  f"{target:>6.0f} {100 * np.mean(r.cost_share):>5.0f}% {np.mean(r.cost_calls):>5.1f} "
                  f"{min(r.rounds)}-{max(r.rounds):<3} {np.mean(r.ratios):>7.3f} {max(r.ratios):>6.3f}")

    if 2 in parts:
        print_speedups(results, costs)
    if 3 in parts:
        print_exact_gap(exact_cost, small_count, args.seed)


def print_speedups(results: list[ScaleResult], costs: dict[int, CostModel]) -> None:
    print("\n2. FCP against the baselines on the same batches: baseline step time / FCP step time "
          "(> 1: FCP faster)")
    names = list(BASELINES)
    header = f"{'dataset':<10} {'batch':>10} " + " ".join(f"{name:>22}" for name in names)
    print(header)
    print("-" * len(header))
    for r in results:
        # A fresh model of the same table, not wrapped by the timer.
        speedups = speedups_over_baselines(CostModel(costs[r.ranks].table), r)
        cells = [f"{v:>21.3f}x" if isinstance(v, float) else f"{'n/a':>22}" for v in speedups.values()]
        print(f"{r.dataset:<10} {f'{r.samples}x{r.ranks}':>10} " + " ".join(cells))
        for name, v in speedups.items():
            if isinstance(v, str):
                print(f"    {name}: {v}")


def print_exact_gap(exact_cost: CostModel, small_count: int, seed: int) -> None:
    print(f"\n3. exact optimum vs planner on {small_count} random instances (<= 10 samples, <= 8 ranks)")
    s = bench_small(exact_cost, small_count, seed)
    gaps = s["gaps"]
    print(f"optimal: {s['optimal']}, infeasible (no plan exists): {s['infeasible']}, not proven in the time "
          f"limit: {s['not_proven']}")
    print(f"planner found no plan where the optimum exists: {s['missed']}")
    print(f"gap to the optimum: mean {100 * gaps.mean():.2f}%, p50 {100 * _pct(gaps, 50):.2f}%, "
          f"p99 {100 * _pct(gaps, 99):.2f}%, max {100 * gaps.max():.2f}%, "
          f"within 1%: {np.mean(gaps <= 0.01):.0%}, exactly optimal: {np.mean(gaps <= 1e-9):.0%}")
    print(f"exact solve time (wall): mean {s['exact_ms'].mean():.0f} ms, p50 {_pct(s['exact_ms'], 50):.0f} ms, "
          f"p99 {_pct(s['exact_ms'], 99):.0f} ms, max {s['exact_ms'].max():.0f} ms")
    print(f"planner CPU time on the same instances: mean {s['plan_ms'].mean():.1f} ms, "
          f"p99 {_pct(s['plan_ms'], 99):.1f} ms")
    print(f"lower bound above the optimum (must be 0): {s['bound_violations']}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
