"""The communicator budget over long simulated runs: distinct groups per rank, predicted step cost, planner time.

For every shipped workload (`mixes.WORKLOADS`), a run of `--steps` planned steps (8 samples per rank, one batch seed
per step) is simulated (`simulate.long_run`) with today's unbounded planner (`communicator_budget=None`) and with
the default budget (ceil(log2 N) + 4), without and with a drifting cost model (true group times +-15% per
(degree, algo), learned by the run's recalibration). Reported per run: distinct communicators of the worst rank and
of the median rank after 300 steps and at the end, the step when the worst rank last grew, the predicted FSDP step
time summed over the steps (budget against unbounded, on the same batches), and the planner's process time per
step (p50 / p95; with drift it includes rebuilding the recalibrated cost model).

    python benchmarks/communicator_budget.py run --ranks 64 --steps 300 -o runs_64.json
    python benchmarks/communicator_budget.py run --ranks 64 --steps 3000 --drift-only --workloads openvid imagevideo \
        -o long_64.json
    python benchmarks/communicator_budget.py cost --ranks 64 256 --steps 100 -o cost.json
    python benchmarks/communicator_budget.py report runs_*.json cost.json > benchmarks/results/communicator_budget.md
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import numpy as np

from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions
from mindspeed_mm.core.fcp.simulate.long_run import Drift, LongRun, simulate_long_run
from mindspeed_mm.core.fcp.simulate.mixes import WORKLOADS
from mindspeed_mm.core.fcp.solver import SolverConfig
from mindspeed_mm.core.fcp.solver.plan import AUTO

PRESET = "a3-qwen3vl-8b"
CHECKPOINT = 300
"""The step the first counts are read at."""


def _summary(run: LongRun, *, drift: bool, preset: str, samples_per_rank: int, wall_s: float) -> dict:
    at = min(CHECKPOINT, run.steps)
    counts_at = _counts_after(run, at)
    return {
        "workload": run.workload, "ranks": run.num_ranks, "steps": run.steps, "budget": run.budget,
        "drift": drift, "preset": preset, "samples_per_rank": samples_per_rank,
        "worst_at_300": int(counts_at.max()), "p50_at_300": float(np.median(counts_at)),
        "worst": run.worst, "p50": float(np.median(run.per_rank)),
        "last_growth_step": run.growth[-1][0] + 1 if run.growth else 0,
        "steps_with_new_communicators": int(sum(1 for n in run.new_communicators[1:] if n)),
        "step_ms_total": float(sum(run.step_ms)), "step_ms_total_at_300": float(sum(run.step_ms[:at])),
        "planner_p50_ms": float(np.percentile(run.planner_ms, 50)),
        "planner_p95_ms": float(np.percentile(run.planner_ms, 95)), "wall_s": wall_s,
    }


def _counts_after(run: LongRun, steps: int) -> np.ndarray:
    """Each rank's distinct communicators after `steps` steps."""
    return run.per_rank if steps >= run.steps else run.snapshots[steps]


def run_part(args: argparse.Namespace) -> list[dict]:
    results = []
    for ranks in args.ranks:
        cost = CostModel.from_preset(args.preset, shard_ranks=ranks)
        for workload in args.workloads:
            for drift in (True,) if args.drift_only else (False,) if args.no_drift else (False, True):
                steps = args.steps if drift else (args.no_drift_steps or args.steps)
                for budget in (None, AUTO):
                    config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node, communicator_budget=budget)
                    started = time.time()
                    run = simulate_long_run(cost, config, workload, steps, samples_per_rank=args.samples_per_rank,
                                            seed=args.seed, drift=Drift(seed=args.seed) if drift else None,
                                            checkpoints=(CHECKPOINT,))
                    results.append(_summary(run, drift=drift, preset=args.preset,
                                            samples_per_rank=args.samples_per_rank, wall_s=time.time() - started))
                    print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def cost_part(args: argparse.Namespace) -> list[dict]:
    results = []
    for preset in args.presets:
        for ranks in args.ranks:
            cost = CostModel.from_preset(preset, shard_ranks=ranks)
            for per_rank in args.samples_per_rank_list:
                for workload in args.workloads:
                    step_ms, worst = {}, {}
                    for budget in (None, AUTO):
                        config = SolverConfig(ranks, ranks_per_node=cost.ranks_per_node, communicator_budget=budget)
                        run = simulate_long_run(cost, config, workload, args.steps, samples_per_rank=per_rank,
                                                seed=args.seed)
                        step_ms[budget], worst[budget] = np.array(run.step_ms), run.worst
                    after, before = step_ms[AUTO], step_ms[None]
                    # The run's own cost model: its memory limit also sets aside the communicators' buffers (NPUs).
                    buffered = FCPOptions(preset=preset).cost_model(num_ranks=ranks)
                    with_buffers = np.array(simulate_long_run(
                        buffered, SolverConfig(ranks, ranks_per_node=cost.ranks_per_node), workload, args.steps,
                        samples_per_rank=per_rank, seed=args.seed).step_ms)
                    results.append({"preset": preset, "ranks": ranks, "samples_per_rank": per_rank,
                                    "workload": workload, "steps": args.steps,
                                    "cost": float(after.sum() / before.sum() - 1),
                                    "cost_with_buffers": float(with_buffers.sum() / before.sum() - 1),
                                    "capacity": cost.capacity_tokens, "capacity_with_buffers": buffered.capacity_tokens,
                                    "worst_step": float((after / before - 1).max()),
                                    "better_steps": int((after < before * (1 - 1e-9)).sum()),
                                    "worse_steps": int((after > before * (1 + 1e-9)).sum()),
                                    "worst_unbounded": worst[None], "worst_budget": worst[AUTO]})
                    print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def report(paths: list[str]) -> str:
    runs, costs = [], []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
        runs.extend(doc.get("runs", []))
        costs.extend(doc.get("cost", []))
    lines = []
    if runs:
        lines += ["| ranks | workload | drift | steps | unbounded: worst / p50 at 300 | at the end | budget | "
                  "budgeted: worst / p50 at 300 | at the end | steps with a new communicator (unb. / budget) | "
                  "predicted step time, budget vs unbounded |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        key = lambda r: (r["ranks"], WORKLOADS.index(r["workload"]), r["drift"])
        by = {}
        for r in runs:
            by.setdefault(key(r), {})[r["budget"]] = r
        for k in sorted(by):
            pair = by[k]
            before, after = pair.get(None), next((v for b, v in pair.items() if b is not None), None)
            if before is None or after is None:
                continue
            cost = after["step_ms_total"] / before["step_ms_total"] - 1
            lines.append(
                f"| {before['ranks']} | {before['workload']} | {'+-15%' if before['drift'] else 'none'} | "
                f"{before['steps']} | {before['worst_at_300']} / {before['p50_at_300']:.0f} | "
                f"{before['worst']} / {before['p50']:.0f} | {after['budget']} | "
                f"{after['worst_at_300']} / {after['p50_at_300']:.0f} | {after['worst']} / {after['p50']:.0f} | "
                f"{before['steps_with_new_communicators']} / {after['steps_with_new_communicators']} | "
                f"{100 * cost:+.3f}% |")
        lines += ["", "Planner process time per step (ms), no drift:", "",
                  "| ranks | workload | unbounded p50 / p95 | budget p50 / p95 |", "|---|---|---|---|"]
        for k in sorted(by):
            pair = by[k]
            before, after = pair.get(None), next((v for b, v in pair.items() if b is not None), None)
            if before is None or after is None or before["drift"]:
                continue
            lines.append(f"| {before['ranks']} | {before['workload']} | {before['planner_p50_ms']:.1f} / "
                         f"{before['planner_p95_ms']:.1f} | {after['planner_p50_ms']:.1f} / "
                         f"{after['planner_p95_ms']:.1f} |")
    if costs:
        lines += ["", "| preset | ranks | samples per rank | workload | steps | predicted step time, budget vs "
                  "unbounded | worst step | steps slower / faster | worst rank's communicators (unbounded / budget) | "
                  "tokens per rank (buffers set aside) | budget and buffers vs unbounded |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in sorted(costs, key=lambda c: (c["preset"], c["ranks"], -c["samples_per_rank"],
                                              WORKLOADS.index(c["workload"]))):
            lines.append(f"| {c['preset']} | {c['ranks']} | {c['samples_per_rank']} | {c['workload']} | {c['steps']} | "
                         f"{100 * c['cost']:+.3f}% | {100 * c['worst_step']:+.2f}% | {c['worse_steps']} / "
                         f"{c['better_steps']} | {c['worst_unbounded']} / {c['worst_budget']} | "
                         f"{c['capacity']:,} ({c['capacity_with_buffers']:,}) | {100 * c['cost_with_buffers']:+.3f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    run = sub.add_parser("run", help="long runs: distinct communicators per rank, cost and planner time")
    run.add_argument("--ranks", type=int, nargs="+", default=[64])
    run.add_argument("--steps", type=int, default=3000, help="steps of the runs with drift (and without, by default)")
    run.add_argument("--no-drift-steps", type=int, default=None, help="steps of the runs without drift")
    run.add_argument("--drift-only", action="store_true", help="only the runs with a drifting model")
    run.add_argument("--no-drift", action="store_true", help="only the runs without drift")
    run.add_argument("--samples-per-rank", type=int, default=8)
    run.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    run.add_argument("--preset", default=PRESET)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("-o", "--output", required=True)
    cost = sub.add_parser("cost", help="predicted step time of the budget against unbounded plans")
    cost.add_argument("--presets", nargs="+", default=[PRESET, "h200-qwen3vl-8b"])
    cost.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    cost.add_argument("--samples-per-rank-list", type=int, nargs="+", default=[8, 2])
    cost.add_argument("--steps", type=int, default=100)
    cost.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    cost.add_argument("--seed", type=int, default=1)
    cost.add_argument("-o", "--output", required=True)
    rep = sub.add_parser("report", help="markdown tables of the JSON files")
    rep.add_argument("inputs", nargs="+")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("mindspeed_mm.core.fcp.solver.memory_checks").setLevel(logging.ERROR)
    if args.part == "report":
        sys.stdout.write(report(args.inputs))
        return
    started = time.time()
    results = run_part(args) if args.part == "run" else cost_part(args)
    doc = {"runs" if args.part == "run" else "cost": results, "argv": sys.argv[1:], "wall_s": time.time() - started,
           "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()[0]}
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1)


if __name__ == "__main__":
    main()
