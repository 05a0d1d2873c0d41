"""The multi-process test helper reports failing, dying and hanging ranks clearly."""
from __future__ import annotations

import os
import threading

import pytest

from distributed_utils import DistributedRunError, run_distributed


def _fail_on_rank_one(rank: int, world_size: int) -> int:
    if rank == 1:
        raise ValueError("rank one refuses")
    return rank


def _hang(rank: int, world_size: int) -> None:
    threading.Event().wait()  # blocks until the run_world timeout terminates it


def _die(rank: int, world_size: int) -> None:
    os._exit(3)


def test_failure_carries_the_rank_and_its_traceback() -> None:
    with pytest.raises(DistributedRunError, match=r"(?s)rank 1 of 2 failed:.*ValueError: rank one refuses"):
        run_distributed(_fail_on_rank_one, 2, timeout_s=60)


def test_dead_rank_and_timeout_are_reported() -> None:
    with pytest.raises(DistributedRunError, match="rank 0 of 1 exited with code 3 without a result"):
        run_distributed(_die, 1, timeout_s=60)
    with pytest.raises(DistributedRunError, match=r"ranks \[0\] of 1 did not finish within 4 s"):
        run_distributed(_hang, 1, timeout_s=4)
