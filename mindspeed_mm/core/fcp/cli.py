"""The `fcp` command line: one entry point, one module per sub-command.

Each module in `COMMAND_MODULES` (under `mindspeed_mm.core.fcp.commands`) exposes
`add_parser(subparsers)`, which registers its sub-command, and `run(args) -> int`.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from mindspeed_mm.core.fcp import __version__

COMMAND_MODULES: tuple[str, ...] = ("plan", "simulate", "train", "demo", "overlay", "profile")
"""Sub-command modules, in the order `fcp --help` lists them."""

_EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The `fcp` parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="fcp", description="Flexible Context Parallelism for MindSpeed-MM: plan, simulate and train."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (repeat for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"mindspeed_mm.core.fcp.commands.{name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `fcp` sub-command; returns the exit status (2 for bad input, with a message on stderr)."""
    parser = build_parser()
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
