"""Atomic file writes: a temporary file in the destination's folder, fsync, then rename over it.

A reader sees either the previous file or the complete new one, never a partial write, even when the
writer is killed. The new file gets the mode an ordinary `open(path, "w")` would give it (0666 less
the process umask), not the 0600 of `tempfile.mkstemp`.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (not possible on every platform: skipped where it is not)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Call `write(handle)` on a temporary file beside `path`, then move it over `path` atomically.

    On any failure (or interruption) the temporary file is removed and `path` is left as it was.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, expected a file name")
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically."""
    atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))
