"""The output folder of `fcp train --output-dir`: a run status, the final parameters and the result.

Rank 0 checks the folder before training and writes `run_status.json` with status `interrupted`
(the run is not complete until it says otherwise). At the end it writes, each file atomically
(temporary file in the folder, fsync, rename): `final_state.pt`, then `run_status.json` with status
`complete`, then `result.json` last. Each carries the run's id, so a reader can tell the files of
one run from those a previous run left: `load_result` accepts only a complete run whose result
belongs to it. A killed run leaves the previous files whole and the status `interrupted`.
"""
from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import torch

from mindspeed_mm.core.fcp.atomic_io import atomic_write, atomic_write_text
from mindspeed_mm.core.fcp.sandbox.results import TrainResult

logger = logging.getLogger(__name__)

RESULT_FILE = "result.json"
"""Per-step record of a run (`TrainResult`), written last."""
FINAL_STATE_FILE = "final_state.pt"
"""Parameters after the last step ({name: tensor})."""
STATUS_FILE = "run_status.json"
"""{"status": "interrupted" | "complete", "run_id": ..., "reason": ...}."""
COMPLETE, INTERRUPTED = "complete", "interrupted"


class OutputDirError(ValueError):
    """The output folder cannot take the run's files; the message names `--output-dir`."""


class IncompleteRunError(ValueError):
    """The output folder does not hold the complete result of one run."""


def check_output_dir(folder: Path) -> None:
    """Raises `OutputDirError` unless `folder` is (or can be created as) a writable folder."""
    if folder.exists() and not folder.is_dir():
        raise OutputDirError(f"--output-dir {folder}: exists and is not a folder")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OutputDirError(f"--output-dir {folder}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputDirError(f"--output-dir {folder}: {existing} is not writable")
    for name in (RESULT_FILE, FINAL_STATE_FILE, STATUS_FILE):
        if (folder / name).is_dir():
            raise OutputDirError(f"--output-dir {folder}: {name} there is a folder")


class RunOutputs:
    """Rank 0's writer of one run's output folder."""

    def __init__(self, folder: Path, run_id: str | None = None) -> None:
        self.folder = folder
        self.run_id = run_id or uuid.uuid4().hex
        """Identifies this run's files."""

    def start(self) -> None:
        """Check the folder, create it, drop temporary files a killed writer left, mark the run interrupted."""
        check_output_dir(self.folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for name in (RESULT_FILE, FINAL_STATE_FILE, STATUS_FILE):
                for stale in self.folder.glob(f".{name}.*.tmp"):
                    stale.unlink()
            self._status(INTERRUPTED, "started, not finished")
        except OSError as err:
            raise OutputDirError(f"--output-dir {self.folder}: cannot write there ({err})") from None

    def interrupted(self, reason: str) -> None:
        """Record why the run stopped (best effort: the status already says interrupted)."""
        try:
            self._status(INTERRUPTED, reason)
        except OSError as err:
            logger.warning("could not record the interruption in %s: %s", self.folder / STATUS_FILE, err)

    def save(self, result: TrainResult, params: dict[str, torch.Tensor]) -> None:
        """Write the final parameters, the status `complete` and `result.json`, in that order."""

        def write_state(handle: BinaryIO) -> None:
            torch.save(params, handle)

        atomic_write(self.folder / FINAL_STATE_FILE, write_state)
        self._status(COMPLETE, None)
        document = {"run_id": self.run_id, "status": COMPLETE, **result.to_json()}
        atomic_write_text(self.folder / RESULT_FILE, json.dumps(document, indent=1))

    def _status(self, status: str, reason: str | None) -> None:
        document = {"status": status, "run_id": self.run_id, "reason": reason}
        atomic_write_text(self.folder / STATUS_FILE, json.dumps(document, indent=1) + "\n")


def read_status(folder: Path) -> dict[str, Any]:
    """The run status of `folder`; raises `IncompleteRunError` if there is none."""
    try:
        return json.loads((folder / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise IncompleteRunError(f"{folder}: no readable {STATUS_FILE} ({err})") from None


def load_result(folder: Path) -> dict[str, Any]:
    """The `result.json` of a complete run; raises `IncompleteRunError` for an interrupted run or a result
    left by another run."""
    status = read_status(folder)
    if status.get("status") != COMPLETE:
        raise IncompleteRunError(f"{folder}: the last run did not complete ({status.get('reason')})")
    try:
        result = json.loads((folder / RESULT_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise IncompleteRunError(f"{folder}: no readable {RESULT_FILE} ({err})") from None
    if result.get("run_id") != status.get("run_id"):
        raise IncompleteRunError(f"{folder}: {RESULT_FILE} belongs to another run than {STATUS_FILE}")
    return result
