"""FCPFeature: turns on Flexible Context Parallelism with ``--context-parallel-algo fcp_cp_algo``.

FCP owns the whole DP x CP plane: every step it splits the ``world_size / (TP x PP)`` ranks that share a
(tp_rank, pp_rank) coordinate into context-parallel groups of any size. Megatron therefore must not build
static CP groups of its own. Before Megatron validates its arguments the feature records the requested
``--context-parallel-size`` in ``args.fcp_static_context_parallel_size`` and sets
``context_parallel_size = 1``, so Megatron computes DP = world size / (TP x PP) and its data-parallel
group spans all FCP ranks: the step's single gradient all-reduce runs over exactly the ranks FCP
re-partitions. The recorded size only documents what the static layout would have been; FCP's groups
are bounded by ``--fcp-max-degree``.

MindSpeed runs every feature's validation hooks whatever its arguments, so each hook returns at once
unless FCP is selected.
"""
from __future__ import annotations

import argparse
import os

from .mindspeed_compat import MindSpeedFeature

FCP_CP_ALGO = "fcp_cp_algo"
ATTENTION_ALGOS = ("auto", "ring", "ulysses")
GROUP_POOL_POLICIES = ("lazy", "prewarm")
FCP_OPTIONS = (
    "fcp_profile_table", "fcp_preset", "fcp_max_degree", "fcp_max_tokens_per_rank", "fcp_attention_algo",
    "fcp_async_planning", "fcp_group_pool", "fcp_ranks_per_node", "fcp_log_plan", "fcp_recalibrate",
    "fcp_recalibration_smoothing",
)
"""Destinations of the `--fcp-*` options, in registration order."""
# Options that change how static CP or attention is laid out and have no meaning under FCP.
INCOMPATIBLE_FLAGS = (
    "use_cp_send_recv_overlap",  # double-buffered static ring
    "kv_head_repeat_before_uly_alltoall",
    "reset_attention_mask",  # FCP builds its own per-document masks from cu_seqlens
)


def str_to_bool(value: str | bool) -> bool:
    """Parse YAML/CLI booleans: ``--fcp-async-planning`` alone, or with true/false/1/0/yes/no."""
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {number}")
    return number


def smoothing_weight(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value!r}") from None
    if not 0.0 < number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {number}")
    return number


class FCPFeature(MindSpeedFeature):
    """Registers, validates and patches FCP into a Megatron / MindSpeed-MM training run."""

    def __init__(self) -> None:
        super().__init__("context-parallel-algo")

    def is_need_apply(self, args: argparse.Namespace) -> bool:
        return getattr(args, "context_parallel_algo", None) == FCP_CP_ALGO

    # ------------------------------------------------------------------ arguments
    def register_args(self, parser: argparse.ArgumentParser) -> None:
        if not any("--context-parallel-algo" in action.option_strings for action in parser._actions):
            parser.add_argument("--context-parallel-algo", type=str, default="megatron_cp_algo",
                                choices=["megatron_cp_algo", "ulysses_cp_algo", "hybrid_cp_algo"],
                                help="Context parallel algorithm.")
        self.add_parser_argument_choices_value(parser, "--context-parallel-algo", FCP_CP_ALGO)

        group = parser.add_argument_group(title="fcp")
        group.add_argument("--fcp-profile-table", type=str, default=None,
                           help="Profile table (JSON) measured by `fcp profile`; overrides --fcp-preset.")
        group.add_argument("--fcp-preset", type=str, default=None,
                           help="Analytic cost preset `<hardware>-<model>`, e.g. a3-qwen3vl-8b (the list is in the "
                                "FCP docs), used when no profile table is given.")
        group.add_argument("--fcp-max-degree", type=positive_int, default=None,
                           help="Largest CP degree of one group (default: all DP x CP ranks).")
        group.add_argument("--fcp-max-tokens-per-rank", type=positive_int, default=None,
                           help="Tokens one rank may hold; overrides the memory limit of the cost table.")
        group.add_argument("--fcp-attention-algo", type=str, default="auto", choices=ATTENTION_ALGOS,
                           help="Attention of a group: auto picks ring or ulysses per group by cost.")
        group.add_argument("--fcp-async-planning", type=str_to_bool, nargs="?", const=True, default=True,
                           help="Plan step t+1 in a background thread while step t runs.")
        group.add_argument("--fcp-group-pool", type=str, default="lazy", choices=GROUP_POOL_POLICIES,
                           help="lazy: create a CP group before the first step whose plan uses it; "
                                "prewarm: create every group of 2..max-degree contiguous ranks at start-up.")
        group.add_argument("--fcp-ranks-per-node", type=positive_int, default=None,
                           help="Ranks sharing a node's fast link (default: the cost table's hardware); "
                                "groups that fit in a node are kept inside one.")
        group.add_argument("--fcp-log-plan", type=str_to_bool, nargs="?", const=True, default=False,
                           help="Log every step's plan (groups, degrees, predicted vs measured time).")
        group.add_argument("--fcp-recalibrate", type=str_to_bool, nargs="?", const=True, default=True,
                           help="Correct the cost model per degree and algo from the measured group times of "
                                "earlier steps (off with pipeline parallelism).")
        group.add_argument("--fcp-recalibration-smoothing", type=smoothing_weight, default=0.3,
                           help="Weight of the newest measurement in the smoothed correction factors, in (0, 1].")

    # ------------------------------------------------------------------ validation
    def pre_validate_args(self, args: argparse.Namespace) -> None:
        if not self.is_need_apply(args):
            return
        self._hand_cp_to_fcp(args)

    def validate_args(self, args: argparse.Namespace) -> None:
        if not self.is_need_apply(args):
            return
        from .validation import validate_fcp_args

        validate_fcp_args(args)

    def post_validate_args(self, args: argparse.Namespace) -> None:
        if not self.is_need_apply(args):
            return
        self._hand_cp_to_fcp(args)
        if getattr(args, "data_parallel_size", None) is not None:
            # Some MindSpeed versions run this hook only after Megatron derived DP from the requested CP.
            args.data_parallel_size = fcp_ranks(args)

    @staticmethod
    def _hand_cp_to_fcp(args: argparse.Namespace) -> None:
        if not hasattr(args, "fcp_static_context_parallel_size"):
            args.fcp_static_context_parallel_size = args.context_parallel_size
        args.context_parallel_size = 1

    # ------------------------------------------------------------------ patches
    def register_patches(self, patch_manager, args: argparse.Namespace) -> None:
        """Validates first (MindSpeed may patch before Megatron validates): bad options patch nothing."""
        from .patches import register_fcp_patches
        from .validation import validate_fcp_args

        validate_fcp_args(args)
        register_fcp_patches(patch_manager, args)


def fcp_ranks(args: argparse.Namespace) -> int:
    """Size of the DP x CP plane FCP re-partitions."""
    world_size = getattr(args, "world_size", None) or int(os.environ.get("WORLD_SIZE", "1"))
    model_parallel = args.tensor_model_parallel_size * args.pipeline_model_parallel_size
    return max(1, world_size // model_parallel) if model_parallel else 1


__all__ = ["FCPFeature", "FCP_CP_ALGO", "fcp_ranks"]
