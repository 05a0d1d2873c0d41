"""`fcp overlay PATH`: place the FCP packages, docs and examples into a MindSpeed-MM checkout.

Only FCP's own files are written; every other file of the checkout is left alone. A file that already
exists with different contents is never overwritten without `--force`, and when any such conflict
exists nothing at all is copied. No file is written outside the checkout, even with `--force`: a
destination reached through a symbolic link that leaves the checkout (or a dangling one) is refused.
The copy is all or nothing (`overlay_install`): a failure part-way leaves the checkout as it was.
"""
from __future__ import annotations

import argparse
import filecmp
from dataclasses import dataclass
from pathlib import Path

import mindspeed_mm.core.fcp as fcp_package
from mindspeed_mm.core.fcp.commands.overlay_install import OverlayEscapeError, install, resolve_inside

PACKAGE_DIRS = ("mindspeed_mm/core/fcp", "mindspeed_mm/features_manager", "mindspeed_mm_fcp")
"""Source-tree folders copied whole (without byte-code caches), but for `SANDBOX_DIR`."""
SANDBOX_DIR = "mindspeed_mm/core/fcp/sandbox"
"""The demo trainer (`fcp train`, `fcp demo`): not part of a MindSpeed-MM run, never copied."""
DOC_FILES = ("docs/zh/features/parallel/fcp.md",)
"""Single files copied as they are."""
MATCHED_FILES = (("docs/zh/features/parallel/images", "fcp*"), ("examples/qwen3vl", "*fcp*"))
"""(folder, glob pattern): the folder's matching files."""
CHECKOUT_MARKERS = ("mindspeed_mm", "examples")
"""Folders a MindSpeed-MM checkout has at its top level."""
ENTRY_LINE = "import mindspeed_mm_fcp.register  # noqa: F401  (FCP: adds fcp_cp_algo to MindSpeed's features)"
"""The line an entry script adds before `import mindspeed.megatron_adaptor`."""

_SKIPPED_PARTS = ("__pycache__",)
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class OverlayEntry:
    """One file of the overlay."""

    relative: Path
    """Path inside both trees."""
    status: str
    """`new` (absent in the checkout), `same` (identical there) or `different` (other contents there)."""
    destination: Path
    """Where the file lands: inside the checkout, symbolic links followed."""


def default_source() -> Path:
    """The source tree this package was installed from (editable installs and checkouts)."""
    return Path(fcp_package.__file__).resolve().parents[3]


def overlay_files(source: Path) -> list[Path]:
    """Every FCP file of `source`, relative to it; raises if `source` lacks the docs or examples."""
    files: list[Path] = []
    for folder in PACKAGE_DIRS:
        root = source / folder
        if not root.is_dir():
            raise ValueError(f"--source {source}: folder {folder}/ is missing")
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(source)
            if relative.is_relative_to(SANDBOX_DIR):
                continue
            if path.is_file() and not set(_SKIPPED_PARTS) & set(path.parts) and path.suffix not in _SKIPPED_SUFFIXES:
                files.append(relative)
    for name in DOC_FILES:
        if not (source / name).is_file():
            raise ValueError(f"--source {source}: file {name} is missing (docs travel only with a source checkout)")
        files.append(Path(name))
    for folder, pattern in MATCHED_FILES:
        matches = sorted(p for p in (source / folder).glob(pattern) if p.is_file())
        if not matches:
            raise ValueError(f"--source {source}: no {pattern} files in {folder}/")
        files.extend(p.relative_to(source) for p in matches)
    return files


def looks_like_checkout(path: Path) -> bool:
    """True when `path` has the top-level folders of a MindSpeed-MM checkout."""
    return all((path / marker).is_dir() for marker in CHECKOUT_MARKERS)


def plan_overlay(source: Path, target: Path) -> list[OverlayEntry]:
    """What copying `source`'s FCP files into `target` (a resolved folder) would do, file by file.

    Raises ValueError naming the file when a destination would leave `target` or two files would land
    on the same destination.
    """
    entries = []
    landed: dict[Path, Path] = {}
    for relative in overlay_files(source):
        try:
            destination = resolve_inside(target, relative)
        except OverlayEscapeError as err:
            raise ValueError(f"overlay path {target}: refused, nothing was copied: {err}") from None
        if destination in landed:
            raise ValueError(f"overlay path {target}: refused, nothing was copied: {relative} and "
                             f"{landed[destination]} would both be written to {destination}")
        landed[destination] = relative
        if not destination.exists():
            status = "new"
        elif filecmp.cmp(source / relative, destination, shallow=False):
            status = "same"
        else:
            status = "different"
        entries.append(OverlayEntry(relative, status, destination))
    return entries


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `fcp overlay`."""
    parser = subparsers.add_parser(
        "overlay",
        help="copy the FCP packages, docs and examples into a MindSpeed-MM checkout",
        description="Copy mindspeed_mm/core/fcp (without the demo trainer), mindspeed_mm/features_manager, "
        "mindspeed_mm_fcp, the FCP docs and the FCP examples into a MindSpeed-MM checkout. Other files are not touched; a file that exists with different "
        "contents is only overwritten with --force.",
    )
    parser.add_argument("path", type=Path, help="root of the MindSpeed-MM checkout")
    parser.add_argument("--force", action="store_true",
                        help="overwrite files with different contents, and accept a path that does not look like "
                        "a MindSpeed-MM checkout")
    parser.add_argument("--dry-run", action="store_true", help="report what would be copied, copy nothing")
    parser.add_argument("--source", type=Path, default=None,
                        help="FCP source tree to copy from (default: the tree this package is installed from)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Check, then copy; prints one line per file and a summary."""
    source = (args.source or default_source()).resolve()
    target: Path = args.path.resolve()
    if not target.is_dir():
        raise ValueError(f"overlay path {target} is not a directory")
    if not args.force and not looks_like_checkout(target):
        raise ValueError(
            f"overlay path {target} does not look like a MindSpeed-MM checkout (it needs the folders "
            f"{', '.join(m + '/' for m in CHECKOUT_MARKERS)}); pass --force to copy anyway"
        )
    if source == target:
        raise ValueError(f"overlay path {target} is the FCP source tree itself")
    entries = plan_overlay(source, target)
    conflicts = [e for e in entries if e.status == "different"]
    if conflicts and not args.force:
        names = "\n  ".join(str(e.relative) for e in conflicts)
        raise ValueError(
            f"{len(conflicts)} file(s) already exist in {target} with different contents; nothing was copied. "
            f"Pass --force to overwrite them:\n  {names}"
        )
    labels = {"new": "copy" if args.dry_run else "copied", "same": "unchanged",
              "different": "overwrite" if args.dry_run else "overwritten"}
    if not args.dry_run:
        install([(source / e.relative, e.destination) for e in entries if e.status != "same"], target)
    for entry in entries:
        print(f"{labels[entry.status]:>11}  {entry.relative}")
    counts = {status: sum(e.status == status for e in entries) for status in labels}
    print(
        f"{'would copy' if args.dry_run else 'copied'} {counts['new']} new and "
        f"{'would overwrite' if args.dry_run else 'overwrote'} {counts['different']} file(s); "
        f"{counts['same']} already up to date; target {target}"
    )
    if not args.dry_run:
        print(f"Enable FCP in an entry script by adding, before `import mindspeed.megatron_adaptor`:\n    {ENTRY_LINE}")
    return 0
