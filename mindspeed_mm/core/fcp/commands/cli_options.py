"""Command-line options shared by sub-commands: cost model, cluster shape, argument types."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from mindspeed_mm.core.fcp.cost import CostModel, ModelDoesNotFitError
from mindspeed_mm.core.fcp.runtime.fcp_options import FCPOptions
from mindspeed_mm.core.fcp.solver import SolverConfig
from mindspeed_mm.core.fcp.solver.plan import LOCKSTEP, STEP_SEMANTICS
from mindspeed_mm_fcp.options import add_cli_argument, positive_int

DEFAULT_PRESET = "a3-qwen3vl-8b"
"""Cost preset used when neither --preset nor --profile is given."""
DEFAULT_RANKS = 64
"""FCP ranks used when --ranks is not given."""


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (seeds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def name_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated names, without blanks."""
    names = tuple(part.strip() for part in text.split(","))
    if not names or any(not n for n in names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """--preset / --profile, --max-tokens-per-rank and --expert-parallel."""
    source = parser.add_mutually_exclusive_group()
    add_cli_argument(source, "fcp_preset", help_note=f"Default: {DEFAULT_PRESET}.")
    add_cli_argument(source, "fcp_profile_table", convert=Path, metavar="FILE")
    add_cli_argument(parser, "fcp_max_tokens_per_rank", metavar="TOKENS")
    parser.add_argument("--expert-parallel", type=positive_int, default=1, metavar="EP",
                        help="ranks a mixture-of-experts model's experts are split over (MindSpeed-MM's FSDP2 "
                        "expert_parallel_size; default 1): each block of EP ranks exchanges the routed tokens of "
                        "every layer, which couples the groups of a round")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """--ranks, --ranks-per-node, --max-degree and --communicator-budget."""
    parser.add_argument("--ranks", type=positive_int, default=DEFAULT_RANKS, help="FCP ranks (DP x CP plane)")
    add_cli_argument(parser, "fcp_ranks_per_node")
    add_cli_argument(parser, "fcp_max_degree")
    add_cli_argument(parser, "fcp_communicator_budget", metavar="COMMUNICATORS")
    parser.add_argument(
        "--allow-idle-ranks",
        action="store_true",
        help="let FCP leave ranks idle in a round when a smaller group is faster (`fcp train` runs idle ranks; "
        "under Megatron's schedule every rank runs every round)",
    )


def cost_model_from_args(args: argparse.Namespace) -> CostModel:
    """The cost model chosen by --preset / --profile, --max-tokens-per-rank and --ranks-per-node. A
    preset shards parameters, gradients and optimizer state over the --ranks ranks of the run (its
    FSDP / distributed-optimizer group), so its memory limit is that of the real cluster."""
    options = cli_options(args)
    ranks = getattr(args, "ranks", None)
    expert_parallel = getattr(args, "expert_parallel", 1)
    if options.profile_table is not None:
        try:
            return options.cost_model(num_ranks=ranks, expert_parallel=expert_parallel)
        except (ValueError, KeyError) as err:
            raise ValueError(f"--profile {args.profile}: {err}") from None
    preset = options.preset
    try:
        return options.cost_model(num_ranks=ranks, expert_parallel=expert_parallel)
    except ModelDoesNotFitError as err:
        raise ValueError(f"--preset {preset} on --ranks {ranks}: {err} (the preset shards the state over "
                         f"--ranks: raise --ranks or pick a smaller model)") from None
    except (ValueError, KeyError) as err:
        raise ValueError(f"--preset {preset}{'' if expert_parallel == 1 else f' --expert-parallel {expert_parallel}'}: "
                         f"{err}") from None


def add_step_semantics_argument(parser: argparse.ArgumentParser) -> None:
    """--step-semantics (`fcp plan`; `fcp simulate` prices both semantics as strategies of their own)."""
    parser.add_argument(
        "--step-semantics",
        choices=STEP_SEMANTICS,
        default=LOCKSTEP,
        help="how the rounds run: lockstep (FSDP, the MindSpeed feature; default) or independent (groups wait "
        "only for their own members and the gradients are reduced once per step, as in fcp train: the plan may "
        "then be a static layout run as independent replicas, with idle ranks)",
    )


def solver_config_from_args(args: argparse.Namespace, cost: CostModel, step_semantics: str = LOCKSTEP) -> SolverConfig:
    """The cluster shape from --ranks and --max-degree; the node size is the cost model's."""
    if args.max_degree is not None and args.max_degree > args.ranks:
        raise ValueError(f"--max-degree {args.max_degree} exceeds --ranks {args.ranks}")
    return cli_options(args).solver_config(num_ranks=args.ranks, cost=cost, step_semantics=step_semantics,
                                           allow_idle_ranks=args.allow_idle_ranks)


def cli_options(args: argparse.Namespace) -> FCPOptions:
    """The FCP options of a planning command (`--preset` defaults to the shipped Qwen3-VL-8B on A3 preset)."""
    options = FCPOptions.from_cli(args)
    if options.preset is None and options.profile_table is None:
        options = dataclasses.replace(options, preset=DEFAULT_PRESET)
    return options
