"""The `fcp` command line: one entry point, one module per sub-command.

Each module in `COMMAND_MODULES` exposes `add_parser(subparsers)`, which registers its sub-command, and
`run(args) -> int`. The product's commands live in `mindspeed_mm.core.fcp.commands`; `fcp train` and
`fcp demo` run the demo trainer and live with it in `mindspeed_mm.core.fcp.sandbox`, registered only
where that package is installed (a MindSpeed-MM checkout overlaid by `fcp overlay` holds the product only).
Every module imports only what its parser needs; what a command runs is imported when it runs.
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


def _available(module: str) -> bool:
    if not module.startswith(_SANDBOX):
        return True
    try:
        return importlib.util.find_spec(_SANDBOX) is not None
    except ImportError:
        return False

_EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The `fcp` parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="fcp", description="Flexible Context Parallelism for MindSpeed-MM: plan, simulate and train."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (repeat for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in filter(_available, COMMAND_MODULES):
        module = importlib.import_module(name)
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
