"""`fcp demo`: plan an OpenVid-like batch for a 64-NPU cluster, then train a tiny model with FCP on 4 CPU processes.

Part 1 plans one global batch with FCP on the Atlas A3 / Qwen3-VL-8B cost preset and prints the
layout with the predicted speedups over the baselines (from the strategy simulator). Part 2 launches
`fcp train` under torchrun on CPU processes (gloo) and shows a progress bar; the full Megatron-style
log goes to a file.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from mindspeed_mm.core.fcp.commands.cli_options import positive_int
from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.simulator import (
    FCP,
    FCP_DDP,
    SimulationConfig,
    draw_batches,
    fcp_counterpart,
    simulate,
)
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.planner import plan_batch

DEMO_PRESET = "a3-qwen3vl-8b"
DEMO_DATASET = "openvid"
DEMO_TRAIN_CONFIG = "tiny_qwen3_fcp"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `fcp demo`."""
    parser = subparsers.add_parser(
        "demo",
        help="plan a 64-NPU batch and train a tiny model with FCP on CPU processes",
        description="Plan an OpenVid-like global batch for a 64-NPU Atlas A3 cluster (Qwen3-VL-8B), print the "
        "plan and FCP's predicted speedup over the baselines, then train a tiny model with FCP on CPU processes.",
    )
    parser.add_argument("--ranks", type=positive_int, default=64, help="NPUs of the planned cluster (default 64)")
    parser.add_argument("--global-batch-size", type=positive_int, default=512, help="samples (default 512)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the OpenVid-like batch (default 0)")
    parser.add_argument("--nproc", type=positive_int, default=4, help="CPU training processes (default 4)")
    parser.add_argument("--output-dir", type=Path, default=Path("out/demo"), help="training log and results")
    parser.add_argument("--skip-training", action="store_true", help="only plan, do not train")
    return parser


def _plan_summary(plan: Plan, lengths: np.ndarray) -> list[str]:
    lines = []
    for index, round_plan in enumerate(plan.rounds):
        sizes = Counter(g.degree for g in round_plan.groups)
        layout = ", ".join(f"{count} x d{degree}" for degree, count in sorted(sizes.items()))
        samples = sum(len(g.samples) for g in round_plan.groups)
        lines.append(f"  round {index}: {round_plan.predicted_ms:>9,.1f} ms  {samples:3d} samples  groups {layout}")
    return lines


def _print_plan_part(args: argparse.Namespace) -> None:
    cost = CostModel.from_preset(DEMO_PRESET, shard_ranks=args.ranks)  # state sharded over the run's ranks
    solver = SolverConfig(num_ranks=args.ranks, ranks_per_node=cost.ranks_per_node)
    config = SimulationConfig(
        solver=solver, datasets=(DEMO_DATASET,), num_batches=1, global_batch_size=args.global_batch_size, seed=args.seed
    )
    lengths, patches = draw_batches(config, DEMO_DATASET)[0]
    plan = plan_batch(lengths, cost, solver, patches)
    print(
        f"== Plan: {DEMO_DATASET}-like batch of {len(lengths)} samples on {args.ranks} NPUs "
        f"({solver.ranks_per_node} per node), preset {DEMO_PRESET}, {cost.capacity_tokens:,} tokens per rank"
    )
    print(
        f"  sample tokens: p50 {int(np.percentile(lengths, 50)):,}  p90 {int(np.percentile(lengths, 90)):,}  "
        f"max {int(lengths.max()):,}  total {int(lengths.sum()):,}"
    )
    for line in _plan_summary(plan, lengths):
        print(line)
    print(
        f"  predicted step {plan.predicted_ms:,.1f} ms, lower bound {plan.lower_bound_ms:,.1f} ms "
        f"(gap {plan.gap_to_lower_bound:.3f}), planned in {plan.solver_ms:.0f} ms"
    )
    report = simulate(config, cost)
    print(f"  with the step's own costs (FSDP rounds, optimizer): "
          f"{report.result(DEMO_DATASET, FCP).mean_iteration_ms:,.1f} ms; under DDP "
          f"{report.result(DEMO_DATASET, FCP_DDP).mean_iteration_ms:,.1f} ms")
    print("== Predicted speedup of FCP over the baselines on this batch (same cost model, step costs included; "
          "DDP layouts against FCP under DDP):")
    width = max(len(r.strategy) for r in report.results)
    for result in report.results:
        if result.strategy in (FCP, FCP_DDP):
            continue
        if not result.ok:
            print(f"  {result.strategy:<{width}} cannot run: {result.error}")
            continue
        speedup = report.speedup(DEMO_DATASET, fcp_counterpart(result.strategy, config.strategies),
                                 over=result.strategy)
        shown = f"{speedup:.3f}"
        verdict = "as fast" if shown == "1.000" else "faster" if speedup > 1.0 else "slower"
        print(f"  {result.strategy:<{width}} {result.mean_iteration_ms:>10,.1f} ms   FCP {shown}x ({verdict})")


def _train_part(args: argparse.Namespace) -> int:
    output = args.output_dir
    output.mkdir(parents=True, exist_ok=True)
    log_path = output / "train.log"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
        "-m", "mindspeed_mm.core.fcp.cli", "train", DEMO_TRAIN_CONFIG, "--cpu", "--progress",
        "--output-dir", str(output / "train"),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    print(f"== Train: tiny Qwen3-shaped model, FCP on {args.nproc} CPU processes (log: {log_path})", flush=True)
    with open(log_path, "w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=None, env=env, check=False)
    if done.returncode != 0:
        print(f"training failed with exit code {done.returncode}; see {log_path}", file=sys.stderr)
        return done.returncode
    from mindspeed_mm.core.fcp.sandbox.run_outputs import load_result

    result = load_result(output / "train")  # the complete run's result, not one a previous run left
    steps = result["steps"]
    mean = {k: float(np.mean([s["timings_ms"][k] for s in steps[1:] or steps])) for k in steps[0]["timings_ms"]}
    degrees = sorted({d for s in steps for r in s["round_degrees"] for d in r})
    print(
        f"  loss {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f} over {len(steps)} steps; "
        f"group degrees used: {degrees}"
    )
    print(
        f"  mean step {mean['step_ms']:.0f} ms: plan wait {mean['plan_wait_ms']:.1f}, forward/backward "
        f"{mean['forward_backward_ms']:.0f}, gradient sync {mean['grad_sync_ms']:.1f} ms"
    )
    uncorrected = [s for s in steps if s["corrections"] is not None and not s["corrections"]["factors"]]
    corrected = [s for s in steps if s["corrections"] is not None and s["corrections"]["factors"]]
    if uncorrected and corrected:
        print(
            f"  cost model vs measured group times (mean error): {_group_time_error(uncorrected):.0f}% in steps "
            f"planned with the preset, {_group_time_error(corrected):.0f}% once recalibrated from measured steps"
        )
    return 0


def _group_time_error(steps: list[dict]) -> float:
    """Mean |predicted - measured| / measured over every group of `steps`, in percent."""
    errors = [abs(p - m) / m for s in steps
              for predicted, measured in zip(s["predicted_group_ms"], s["measured_group_ms"])
              for p, m in zip(predicted, measured)]
    return 100.0 * float(np.mean(errors))


def run(args: argparse.Namespace) -> int:
    """Plan, then train."""
    _print_plan_part(args)
    if args.skip_training:
        return 0
    return _train_part(args)
