"""`fcp simulate`: plan K global batches per dataset with FCP and every baseline; print the speedups."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mindspeed_mm.core.fcp.commands.cli_options import (
    DEFAULT_PRESET,
    add_cluster_arguments,
    add_cost_arguments,
    cost_model_from_args,
    name_list,
    non_negative_int,
    positive_int,
    solver_config_from_args,
)
from mindspeed_mm.core.fcp.commands.output_paths import check_image_path
from mindspeed_mm.core.fcp.simulate.seeds import plot_sweep, simulate_seeds
from mindspeed_mm.core.fcp.simulate.simulator import STRATEGIES, SimulationConfig
from mindspeed_mm.core.fcp.simulate.mixes import WORKLOADS
from mindspeed_mm.core.fcp.simulate.workloads import DATASETS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `fcp simulate`."""
    parser = subparsers.add_parser(
        "simulate",
        help="compare FCP with the baselines over many batches",
        description="Plan K global batches of each dataset with every strategy on one cost model and report "
        "predicted iteration times, speedups over Megatron-LM static CP and of FCP over each strategy (mean "
        "[min-max] over seeds x batches) and ratios to the lower bound.",
    )
    parser.add_argument(
        "--datasets", type=name_list, default=DATASETS,
        help=f"comma-separated, of {','.join(WORKLOADS)} (default {','.join(DATASETS)})"
    )
    parser.add_argument(
        "--strategies", type=name_list, default=STRATEGIES, help=f"comma-separated (default {','.join(STRATEGIES)})"
    )
    parser.add_argument("--batches", type=positive_int, default=8, metavar="K", help="batches per dataset (default 8)")
    parser.add_argument("--global-batch-size", type=positive_int, default=512, help="samples per batch (default 512)")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=seed_list, default=DEFAULT_SEEDS, metavar="S,S,...",
                       help="comma-separated generator seeds; every seed is one run of K batches and every speedup "
                       "is reported as mean [min-max] over seeds x batches "
                       f"(default {','.join(map(str, DEFAULT_SEEDS))})")
    seeds.add_argument("--seed", type=non_negative_int, help="one generator seed (the same as --seeds SEED)")
    add_cluster_arguments(parser)
    add_cost_arguments(parser)
    parser.add_argument("--plot", type=Path, metavar="PNG", help="also draw the speedups to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


DEFAULT_SEEDS = (0, 1, 2)
"""Seeds of `fcp simulate` when neither --seeds nor --seed is given."""


def seed_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated non-negative integers, none repeated."""
    parts = [part.strip() for part in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated seeds, got {text!r}")
    seeds = tuple(non_negative_int(p) for p in parts)
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"a seed is repeated in {text!r}")
    return seeds


def _checked(names: tuple[str, ...], known: tuple[str, ...], option: str) -> tuple[str, ...]:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"{option}: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{option}: an entry is repeated in {','.join(names)}")
    return names


def run(args: argparse.Namespace) -> int:
    """Simulate and print the table."""
    if args.plot is not None:
        check_image_path(args.plot, "--plot")
    cost = cost_model_from_args(args)
    seeds = (args.seed,) if args.seed is not None else args.seeds
    config = SimulationConfig(
        solver=solver_config_from_args(args, cost),
        datasets=_checked(tuple(args.datasets), WORKLOADS, "--datasets"),
        strategies=_checked(tuple(args.strategies), STRATEGIES, "--strategies"),
        num_batches=args.batches,
        global_batch_size=args.global_batch_size,
        seed=seeds[0],
    )
    sweep = simulate_seeds(config, cost, seeds, progress=not args.no_progress and sys.stderr.isatty())
    source = f"--profile {args.profile}" if args.profile is not None else f"preset {args.preset or DEFAULT_PRESET}"
    print(f"{source}, {cost.capacity_tokens:,d} tokens per rank")
    print(sweep.table())
    if args.plot is not None:
        print(f"plot: {plot_sweep(sweep, args.plot)}")
    return 0
