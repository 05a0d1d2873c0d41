"""The FCP options: one definition from which the ``--fcp-*`` flags, the YAML keys and the CLI flags derive.

A YAML key ``fcp_max_degree: 16`` under ``gpt_args:`` becomes ``--fcp-max-degree 16`` (MindSpeed-MM's
YAML reader turns every key into a flag); the flag's destination is the key again. MindSpeed parses
the command line once before Megatron does and keeps the flags it does not know as strings;
:func:`coerce_option` turns such a string into the option's value with the same checks argparse
applies, so every path gives the same values and the same errors. The planning CLI (`fcp plan`,
`fcp simulate`) registers the options that have a ``cli_flag`` with :func:`add_cli_argument`.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

FCP_CP_ALGO = "fcp_cp_algo"
"""The value of ``--context-parallel-algo`` that turns FCP on."""
ATTENTION_ALGOS = ("auto", "ring", "ulysses")
ATTENTION_KERNELS = ("auto", "npu_fusion", "torch_varlen", "flash_attn", "torch")
"""Local attention kernels (`mindspeed_mm.core.fcp.parallel.kernels`); `auto` picks by device."""
GROUP_POOL_POLICIES = ("lazy", "prewarm")


def str_to_bool(value: str | bool) -> bool:
    """YAML/CLI booleans: the flag alone, or with true/false/1/0/yes/no/on/off."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")


def positive_int(value: str | int) -> int:
    """An integer above zero; bools are refused (``True`` is not a count)."""
    if isinstance(value, bool):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if isinstance(value, float) and value != number:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {number}")
    return number


def smoothing_weight(value: str | float) -> float:
    """A weight in (0, 1]."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value!r}") from None
    if not 0.0 < number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {number}")
    return number


def positive_seconds(value: str | float) -> float:
    """A finite number of seconds above zero."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not 0.0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return number


def text(value: str) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise argparse.ArgumentTypeError(f"expected a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class FCPOption:
    """One FCP option."""

    dest: str
    """Destination and YAML key (``fcp_max_degree``)."""
    parse: Callable[[Any], Any]
    """Turns the command-line string (or YAML value) into the option's value; raises ArgumentTypeError."""
    default: Any
    """Value when the option is not given."""
    help: str
    """One-line description (flag help and docs)."""
    choices: tuple[str, ...] | None = None
    """Allowed values, for options with a closed set."""
    is_flag: bool = False
    """A boolean that may be given alone (``--fcp-log-plan``) or with a value."""
    cli_flag: str | None = None
    """The option's flag in the planning CLI (``--max-degree``); None: not an option there."""

    @property
    def flag(self) -> str:
        """The command-line flag (``--fcp-max-degree``)."""
        return "--" + self.dest.replace("_", "-")

    @property
    def cli_dest(self) -> str:
        """The planning CLI's destination (``max_degree``); the option must have a ``cli_flag``."""
        if self.cli_flag is None:
            raise ValueError(f"{self.dest} is not an option of the planning CLI")
        return self.cli_flag.removeprefix("--").replace("-", "_")


FCP_OPTIONS: tuple[FCPOption, ...] = (
    FCPOption("fcp_profile_table", text, None,
              "Profile table (JSON) measured by `fcp profile`; used instead of a preset.", cli_flag="--profile"),
    FCPOption("fcp_preset", text, None,
              "Analytic cost preset `<hardware>-<model>`, e.g. a3-qwen3vl-8b (the list is in the FCP docs), "
              "used when no profile table is given.", cli_flag="--preset"),
    FCPOption("fcp_max_degree", positive_int, None,
              "Largest CP degree of one group (default: all FCP ranks, i.e. the DP x CP plane).",
              cli_flag="--max-degree"),
    FCPOption("fcp_max_tokens_per_rank", positive_int, None,
              "LLM tokens one rank may hold (default: the memory limit of the cost model); it can only lower that "
              "limit: a larger value is capped at it, with a warning.", cli_flag="--max-tokens-per-rank"),
    FCPOption("fcp_attention_algo", str, "auto",
              "Attention of a group: auto picks ring, ulysses or hybrid (Ulysses inside blocks of a node, ring across "
              "the blocks) per group by cost; ring or ulysses forces one.", choices=ATTENTION_ALGOS),
    FCPOption("fcp_attention_kernel", str, "auto",
              "Local attention kernel of ring and Ulysses blocks: auto (npu_fusion on NPU; torch_varlen on CUDA, "
              "else flash_attn where installed, else the torch reference with a warning; torch on CPU), "
              "npu_fusion (torch_npu.npu_fusion_attention), torch_varlen (torch >= 2.10 varlen flash attention), "
              "flash_attn (the flash-attn package) or torch (PyTorch reference, any device, slow).",
              choices=ATTENTION_KERNELS),
    FCPOption("fcp_async_planning", str_to_bool, True, "Plan step t+1 in a background thread while step t runs.",
              is_flag=True),
    FCPOption("fcp_group_pool", str, "lazy",
              "lazy: create a CP group (and make it ready with a first collective) before the first step whose plan "
              "uses it; prewarm: every group the communicator budget allows, at start-up.", choices=GROUP_POOL_POLICIES),
    FCPOption("fcp_communicator_budget", positive_int, None,
              "Communicators (CP groups, the DP x CP plane's own group included) one rank may join over the whole run "
              "(default: ceil(log2 N) + 4 for N FCP ranks). Plans use a fixed set of groups on an aligned grid within "
              "it; on NPUs the memory limit sets aside 2 x HCCL_BUFFSIZE per communicator.",
              cli_flag="--communicator-budget"),
    FCPOption("fcp_ranks_per_node", positive_int, None,
              "Ranks sharing a node's fast link (default: that of the profile table's or preset's hardware); "
              "groups that fit in a node are kept inside one.", cli_flag="--ranks-per-node"),
    FCPOption("fcp_log_plan", str_to_bool, False,
              "Log every step's plan (groups, degrees, predicted vs measured time).", is_flag=True),
    FCPOption("fcp_recalibrate", str_to_bool, True,
              "Correct the cost model per degree and algo from the measured group times of earlier steps.",
              is_flag=True),
    FCPOption("fcp_recalibration_smoothing", smoothing_weight, 0.3,
              "Weight of the newest measurement in the smoothed correction factors, in (0, 1]."),
    FCPOption("fcp_comm_timeout_s", positive_seconds, 300.0,
              "Seconds one exchange on an FCP group (and its creation) may take before every member stops with "
              "an error naming the group; far below torch's 30-minute default. Megatron's world and process "
              "groups keep --distributed-timeout-minutes."),
)
"""Every FCP option, in registration order."""
OPTIONS_BY_DEST = {option.dest: option for option in FCP_OPTIONS}


class FCPOptionError(ValueError):
    """An FCP option, or its combination with another option, is invalid; the message names the flag."""


class ArgumentContainer(Protocol):
    """An argparse parser, argument group or mutually exclusive group."""

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action:
        """Registers one argument."""


def _argument_kwargs(option: FCPOption) -> dict[str, Any]:
    """The ``add_argument`` keywords every flag of `option` shares: type, default, help, choices, nargs."""
    kwargs: dict[str, Any] = {"type": option.parse, "default": option.default, "help": option.help}
    if option.choices is not None:
        kwargs["choices"] = option.choices
    if option.is_flag:
        kwargs.update(nargs="?", const=True)
    return kwargs


def add_fcp_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the ``--fcp-*`` flags in one argument group."""
    group = parser.add_argument_group(title="fcp")
    for option in FCP_OPTIONS:
        group.add_argument(option.flag, dest=option.dest, **_argument_kwargs(option))


def _converted(parse: Callable[[Any], Any], convert: Callable[[Any], Any]) -> Callable[[str], Any]:
    """argparse type: `parse`, then `convert` of its value; an ArgumentTypeError of `parse` passes unchanged."""

    def parse_and_convert(value: str) -> Any:
        return convert(parse(value))

    parse_and_convert.__name__ = getattr(parse, "__name__", "value")
    return parse_and_convert


def add_cli_argument(parser: ArgumentContainer, dest: str, *, convert: Callable[[Any], Any] | None = None,
                     metavar: str | None = None, help_note: str | None = None) -> argparse.Action:
    """Registers FCP option `dest` on `parser` under its planning-CLI flag, with the option's parse, help and
    choices; `convert` turns the parsed value into the type the CLI keeps (``pathlib.Path``), and `help_note`
    is appended to the shared help (what holds on this parser only, e.g. its own fallback)."""
    option = OPTIONS_BY_DEST[dest]
    kwargs = _argument_kwargs(option)
    if convert is not None:
        kwargs["type"] = _converted(option.parse, convert)
    if metavar is not None:
        kwargs["metavar"] = metavar
    if help_note is not None:
        kwargs["help"] = f"{option.help} {help_note}"
    cli_dest = option.cli_dest  # refuses an option without a cli_flag
    return parser.add_argument(str(option.cli_flag), dest=cli_dest, **kwargs)


def coerce_option(dest: str, value: Any) -> Any:
    """The value of option `dest` given as `value` (a pre-parsed string, a YAML value, or already typed)."""
    option = OPTIONS_BY_DEST[dest]
    if value is None or (value is True and option.is_flag):
        return option.default if value is None else True
    try:
        parsed = option.parse(value)
    except argparse.ArgumentTypeError as err:
        raise FCPOptionError(f"{option.flag}: {err}") from None
    if option.choices is not None and parsed not in option.choices:
        raise FCPOptionError(f"{option.flag}={parsed!r}: choose one of {', '.join(option.choices)}")
    return parsed


def int_argument(args: argparse.Namespace, dest: str, default: int) -> int:
    """A Megatron integer option that MindSpeed's first parse may still hold as a string."""
    value = getattr(args, dest, None)
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise FCPOptionError(f"--{dest.replace('_', '-')}: expected an integer, got {value!r}") from None


__all__ = [
    "ATTENTION_ALGOS", "ATTENTION_KERNELS", "FCPOption", "FCPOptionError", "FCP_CP_ALGO", "FCP_OPTIONS", "GROUP_POOL_POLICIES",
    "OPTIONS_BY_DEST", "add_cli_argument", "add_fcp_arguments", "coerce_option", "int_argument", "positive_int",
    "positive_seconds", "smoothing_weight", "str_to_bool",
]
