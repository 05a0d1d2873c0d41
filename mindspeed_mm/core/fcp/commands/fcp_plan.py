"""`fcp plan`: plan one global batch and print the layout (text or JSON), optionally as a Gantt chart."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from mindspeed_mm.core.fcp.solver.step_time import INDEPENDENT, dataflow_ms
from mindspeed_mm.core.fcp.commands.cli_options import (
    DEFAULT_PRESET,
    add_cluster_arguments,
    add_cost_arguments,
    add_step_semantics_argument,
    cost_model_from_args,
    non_negative_int,
    positive_int,
    solver_config_from_args,
)
from mindspeed_mm.core.fcp.commands.output_paths import check_image_path
from mindspeed_mm.core.fcp.cost import CostModel
from mindspeed_mm.core.fcp.simulate.workloads import DATASETS, generate_samples, load_lengths
from mindspeed_mm.core.fcp.solver import Plan, SolverConfig
from mindspeed_mm.core.fcp.solver.planner import plan_batch
from mindspeed_mm.core.fcp.solver.baselines import BASELINES, BaselineInfeasibleError

DEFAULT_DATASET = "openvid"
DEFAULT_BATCH_SIZE = 512


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `fcp plan`."""
    parser = subparsers.add_parser(
        "plan",
        help="plan one global batch",
        description="Split the FCP ranks into context-parallel groups for one global batch and print the plan.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--dataset", choices=DATASETS, help=f"draw the batch from a generator (default {DEFAULT_DATASET})"
    )
    source.add_argument(
        "--lengths", type=Path, metavar="FILE", help="sample lengths: one integer per line, or a JSON list"
    )
    parser.add_argument(
        "--batch-size", type=positive_int, help=f"samples drawn with --dataset (default {DEFAULT_BATCH_SIZE})"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="generator seed for --dataset (default 0)")
    add_cluster_arguments(parser)
    add_step_semantics_argument(parser)
    add_cost_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON instead of text")
    parser.add_argument("--gantt", type=Path, metavar="PNG", help="also draw the plan (ranks x time) to this file")
    return parser


def _batch(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(lengths, vision patches or None, description) of the batch to plan."""
    if args.lengths is not None:
        if args.batch_size is not None:
            raise ValueError("--batch-size applies to --dataset only; --lengths plans every sample of the file")
        lengths = load_lengths(args.lengths)
        return lengths, None, f"{args.lengths} ({lengths.size} samples)"
    dataset = args.dataset or DEFAULT_DATASET
    size = args.batch_size or DEFAULT_BATCH_SIZE
    samples = generate_samples(dataset, size, args.seed)
    return samples.lengths, samples.vision_patches, f"{dataset} batch of {size} samples (seed {args.seed})"


def _rank_range(ranks: Sequence[int]) -> str:
    return f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


def format_plan(plan: Plan, lengths: np.ndarray) -> list[str]:
    """Per round: its time and groups (ranks, degree, algo, samples, tokens, predicted ms)."""
    lines = []
    for index, round_plan in enumerate(plan.rounds):
        lines.append(f"round {index}: {round_plan.predicted_ms:,.1f} ms, {len(round_plan.groups)} groups")
        for g in round_plan.groups:
            tokens = int(sum(int(lengths[s]) for s in g.samples))
            noun = "sample" if len(g.samples) == 1 else "samples"
            lines.append(
                f"  ranks {_rank_range(g.ranks):>7}  d={g.degree:<3d} {g.algo_label:<11} {len(g.samples):4d} {noun:<7} "
                f"{tokens:>9,d} tokens  {g.predicted_ms:>10,.1f} ms"
            )
    return lines


def _baseline_lines(
    plan: Plan, lengths: np.ndarray, patches: np.ndarray | None, cost: CostModel, config: SolverConfig
) -> list[str]:
    """Each baseline's predicted time on the same batch and FCP's speedup over it."""
    lines = ["baselines on this batch (static CP sized for its longest sample):"]
    for name, baseline in BASELINES.items():
        try:
            other = baseline.planner(lengths, cost, config, patches)
        except BaselineInfeasibleError as err:
            lines.append(f"  {name:<24} n/a: {err}")
            continue
        degree = f" (CP {other.extras['cp_degree']})" if "cp_degree" in other.extras else ""
        speedup = other.predicted_ms / plan.predicted_ms if plan.predicted_ms > 0 else math.inf
        lines.append(f"  {name + degree:<30} {other.predicted_ms:>12,.1f} ms   FCP speedup {speedup:.2f}x")
    return lines


def run(args: argparse.Namespace) -> int:
    """Plan the batch and print it."""
    if args.gantt is not None:
        check_image_path(args.gantt, "--gantt")
    cost = cost_model_from_args(args)
    config = solver_config_from_args(args, cost, args.step_semantics)
    lengths, patches, description = _batch(args)
    plan = plan_batch(lengths, cost, config, patches)
    if args.gantt is not None:
        from mindspeed_mm.core.fcp.simulate.gantt import draw_plan

        draw_plan(plan, args.gantt, lengths=lengths)
    if args.json:
        print(json.dumps(plan.to_json(), indent=1))
        return 0
    source = f"--profile {args.profile}" if args.profile is not None else f"preset {args.preset or DEFAULT_PRESET}"
    print(
        f"FCP plan for {description} on {config.num_ranks} ranks ({config.ranks_per_node} per node), "
        f"{source}, {cost.capacity_tokens:,d} tokens per rank"
    )
    buffers = cost.table.provenance.get("communicator_buffers")
    print(f"CP groups: {config.catalogue(cost.algos, cost.hybrid_rule.block).describe()}"
          + (f"; buffers set aside: {buffers}" if buffers else ""))
    for line in format_plan(plan, lengths):
        print(line)
    print(f"predicted step time  {plan.predicted_ms:,.1f} ms over {plan.num_rounds} rounds in lockstep")
    if config.step_semantics == INDEPENDENT:
        layout = plan.extras.get("independent_replicas")
        chosen = (f"static {layout['algo']} CP {layout['cp_degree']} as independent replicas" if layout
                  else "FCP's rounds")
        print(f"                     {dataflow_ms(plan):,.1f} ms with each group waiting only for its own "
              f"members ({chosen})")
    print(f"lower bound          {plan.lower_bound_ms:,.1f} ms (plan / bound = {plan.gap_to_lower_bound:.3f})")
    print(f"planning time        {plan.solver_ms:.1f} ms")
    print(f"plan digest          {plan.digest()[:16]}")
    for line in _baseline_lines(plan, lengths, patches, cost, config):
        print(line)
    if args.gantt is not None:
        print(f"gantt chart          {args.gantt}")
    return 0
