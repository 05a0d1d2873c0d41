"""Communication failures reported with the step, the exchange and the ranks of its group.

A collective or point-to-point exchange whose peer stalls (stopped, swapped out, hung in a kernel)
fails after the group's timeout with a backend message such as gloo's "Timed out waiting 5000ms for
recv operation to complete", which says neither which group nor which step. `communication(...)`
turns such a failure into a `CommunicationError` that does; other errors pass through unchanged.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch.distributed as dist

# Substrings of the backends' failure messages (gloo, NCCL, HCCL, the c10d store); matched lower-case.
_MARKERS = ("timed out", "timeout", "connection reset", "connection closed", "broken pipe", "gloo", "nccl",
            "hccl", "c10d")


class CommunicationError(RuntimeError):
    """An exchange failed or timed out; the message names the step, the exchange and the group's ranks."""


def is_communication_failure(err: BaseException) -> bool:
    """True for the errors a process-group backend or store raises when a peer stalls or dies."""
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(err, dist_error):
        return True
    return isinstance(err, RuntimeError) and any(marker in str(err).lower() for marker in _MARKERS)


@contextmanager
def communication(when: str, what: str, ranks: Sequence[int], timeout_s: float | None = None) -> Iterator[None]:
    """Re-raise a communication failure inside the block as a `CommunicationError` naming `when` (e.g.
    "step 3"), `what` was exchanged and the group's global `ranks`; `timeout_s` is the wait the group allows."""
    try:
        yield
    except CommunicationError:
        raise
    except Exception as err:
        if not is_communication_failure(err):
            raise
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        limit = "" if timeout_s is None else (
            f" within the {timeout_s:g} s communication timeout (fcp_comm_timeout_s, fcp train --comm-timeout-s)")
        raise CommunicationError(
            f"{when}: {what} over the group of ranks {list(ranks)} failed{limit}; a rank of the group "
            f"stalled or died: {detail}"
        ) from err
