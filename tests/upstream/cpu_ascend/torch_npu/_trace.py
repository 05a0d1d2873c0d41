"""Counts of the implemented operators' calls, written at exit when `CPU_ASCEND_CALLS_DIR` is set.

The bed's tests read them to check that a run really went through the Ascend operators (for example
`npu_fusion_attention` in the TND layout with sparse_mode 3 for the text model).
"""
from __future__ import annotations

import atexit
import collections
import json
import os

CALLS: collections.Counter = collections.Counter()


def count(key: str) -> None:
    CALLS[key] += 1


def _dump() -> None:
    folder = os.environ.get("CPU_ASCEND_CALLS_DIR")
    if not folder or not CALLS:
        return
    os.makedirs(folder, exist_ok=True)
    name = f"calls_rank{os.environ.get('RANK', '0')}_pid{os.getpid()}.json"
    with open(os.path.join(folder, name), "w") as handle:
        json.dump(dict(CALLS), handle, indent=1, sort_keys=True)


atexit.register(_dump)
