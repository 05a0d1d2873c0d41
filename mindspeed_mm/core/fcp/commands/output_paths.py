"""Checks of output file options, made before any work so that a bad path fails at once."""
from __future__ import annotations

from pathlib import Path


def check_image_path(path: Path, option: str) -> None:
    """Raise ValueError naming `option` unless `path` can be written as an image file.

    A folder, a missing parent folder or a name without a suffix are refused: matplotlib would write
    `PATH.png` beside a folder or a suffix-less name instead of the path given.
    """
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a folder; give an image file name, e.g. {path / 'plan.png'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{option} {path}: folder {parent} does not exist")
    if not path.suffix:
        raise ValueError(f"{option} {path}: give the file name with its image suffix, e.g. {path}.png")
