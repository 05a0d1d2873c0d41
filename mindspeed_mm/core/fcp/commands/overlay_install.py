"""Where an overlay file lands, and copying all of them into a target folder as one step.

`resolve_inside` follows a destination's path component by component: a symbolic link is followed
only when it resolves inside the target, a dangling link or a `..` is refused, so no file is ever
written outside the target, whatever the checkout's links point at. `install` first copies every
file into a staging folder inside the target, then moves each into place (moving a file it
replaces aside first); any failure moves everything back, so the target is left as it was.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

STAGING_PREFIX = ".fcp-overlay-"
"""Name prefix of the staging folder created inside the target (removed when the overlay ends)."""


class OverlayEscapeError(ValueError):
    """A destination would lie outside the target, or cannot be a file there."""


def resolve_inside(target: Path, relative: Path) -> Path:
    """The file `relative` names under `target` (a resolved folder), following links that stay inside it.

    Raises `OverlayEscapeError` for an absolute path or `..`, a link that leaves the target or
    points nowhere, a path component that is not a folder, or a destination that is not a regular file.
    """
    parts = relative.parts
    if relative.is_absolute() or not parts or any(part in ("..", ".") for part in parts):
        raise OverlayEscapeError(f"{relative}: not a plain path inside the target")
    current = target
    for index, part in enumerate(parts):
        candidate = current / part
        shown = Path(*parts[: index + 1])
        if candidate.is_symlink():
            if not candidate.exists():
                raise OverlayEscapeError(f"{relative}: {shown} is a dangling symbolic link "
                                         f"(to {os.readlink(candidate)})")
            resolved = candidate.resolve()
            if not resolved.is_relative_to(target):
                raise OverlayEscapeError(f"{relative}: {shown} is a symbolic link out of the target (to {resolved})")
            candidate = resolved
        if candidate.exists():
            last = index == len(parts) - 1
            if not last and not candidate.is_dir():
                raise OverlayEscapeError(f"{relative}: {shown} exists and is not a folder")
            if last and not candidate.is_file():
                raise OverlayEscapeError(f"{relative}: exists and is not a regular file")
        current = candidate
    return current


def _make_parents(folder: Path, created: list[Path]) -> None:
    """Create `folder` and its missing parents, recording each one created (outermost first)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir()
        created.append(path)


def _roll_back(moved: list[tuple[Path, Path | None]], created: list[Path]) -> bool:
    """Undo the moves and folder creations; False if a replaced file could not be put back."""
    restored = True
    for destination, backup in reversed(moved):
        try:
            if backup is not None:
                os.replace(backup, destination)
            else:
                destination.unlink(missing_ok=True)
        except OSError:
            restored = False
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            pass
    return restored


def install(copies: Sequence[tuple[Path, Path]], target: Path) -> None:
    """Copy each (source file, destination) into `target`, all or nothing.

    Destinations must come from `resolve_inside(target, ...)`. On failure (or interruption) the
    target is restored and the error re-raised: an OSError names the file it failed on. Should a
    replaced file fail to move back, the staging folder (which holds it) is kept and named.
    """
    if not copies:
        return
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target))
    moved: list[tuple[Path, Path | None]] = []
    created: list[Path] = []
    current = target
    keep_staging = False
    try:
        staged = []
        for index, (source, destination) in enumerate(copies):
            current = destination
            staged.append(staging / f"{index}.new")
            shutil.copy2(source, staged[-1])
        for index, ((_, destination), new) in enumerate(zip(copies, staged)):
            current = destination
            _make_parents(destination.parent, created)
            backup = None
            if destination.exists():
                backup = staging / f"{index}.old"
                os.replace(destination, backup)
            moved.append((destination, backup))
            os.replace(new, destination)
    except BaseException as err:
        keep_staging = not _roll_back(moved, created)
        if not isinstance(err, OSError):
            raise
        outcome = (f"some replaced files could not be put back; they are in {staging}" if keep_staging
                   else "the target was left as it was")
        raise OSError(f"overlay into {target} failed at {current}: {err}; {outcome}") from err
    finally:
        if not keep_staging:
            shutil.rmtree(staging, ignore_errors=True)
