"""The `fcp` command line: one entry point, one module per sub-command.

Each module in `COMMAND_MODULES` exposes `add_parser(subparsers)`, which registers its sub-command, and
`run(args) -> int`. The product's commands live in `mindspeed_mm.core.fcp.commands`; `fcp train` and
`fcp demo` run the demo trainer and live with it in `mindspeed_mm.core.fcp.sandbox`, registered only
where that package is installed (a MindSpeed-MM checkout overlaid by `fcp overlay` holds the product only).

`fcp <command> ...` imports only that command's module, and every module imports only what its parser needs
(what a command runs is imported when it runs): `fcp --help` imports no command module at all (it lists
`SUMMARIES`), so neither it nor `fcp plan` or `fcp overlay` loads torch or scipy.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from typing import Sequence

from mindspeed_mm.core.fcp import __version__

_PRODUCT = "mindspeed_mm.core.fcp.commands"
_SANDBOX = "mindspeed_mm.core.fcp.sandbox"
COMMAND_MODULES: tuple[str, ...] = (
    f"{_PRODUCT}.fcp_plan", f"{_PRODUCT}.fcp_simulate", f"{_SANDBOX}.fcp_train", f"{_SANDBOX}.fcp_demo",
    f"{_PRODUCT}.fcp_overlay", f"{_PRODUCT}.fcp_profile",
)
"""Sub-command modules, in the order `fcp --help` lists them."""
SUMMARIES: dict[str, str] = {
    "plan": "plan one global batch",
    "simulate": "compare FCP with the baselines over many batches",
    "train": "train the tiny model with FCP or static CP (one process per rank, via torchrun)",
    "demo": "plan a 64-NPU batch and train a tiny model with FCP on CPU processes",
    "overlay": "copy the FCP packages, docs and examples into a MindSpeed-MM checkout",
    "profile": "measure the cost model's profile table on this host (and validate it)",
}
"""Each command's one-line help (its module's `help`, checked by the tests), for the listing of `fcp --help`."""
_EXIT_USAGE = 2


def _available(module: str) -> bool:
    if not module.startswith(_SANDBOX):
        return True
    try:
        return importlib.util.find_spec(_SANDBOX) is not None
    except ImportError:
        return False


def command_name(module: str) -> str:
    """`mindspeed_mm.core.fcp.commands.fcp_plan` -> `plan`."""
    return module.rsplit(".", 1)[1].removeprefix("fcp_")


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="fcp", description="Flexible Context Parallelism for MindSpeed-MM: plan, simulate and train."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (repeat for debug)")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND", required=True)


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `fcp` parser with the sub-commands `commands` fully registered (default: every available one); the
    others are listed by their summary only."""
    parser, subparsers = _top_parser()
    for module_name in filter(_available, COMMAND_MODULES):
        name = command_name(module_name)
        if commands is None or name in commands:
            module = importlib.import_module(module_name)
            module.add_parser(subparsers).set_defaults(handler=module.run)
        else:
            subparsers.add_parser(name, help=SUMMARIES[name], add_help=False)
    return parser


def _requested_command(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line (the first argument that is not an option of `fcp` itself)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
        if arg in ("-h", "--help", "--version"):
            return None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `fcp` sub-command; returns the exit status (2 for bad input, with a message on stderr)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    requested = _requested_command(argv)
    parser = build_parser(() if requested is None else (requested,))
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else _EXIT_USAGE
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.handler(args))
    except (ValueError, OSError) as err:
        # Bad input: every error raised for it names the option, file, field or sample at fault.
        print(f"fcp {args.command}: error: {err}", file=sys.stderr)
        return _EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
