"""The patch managers the feature tests run against: the fallback always, MindSpeed's own where it is installed.

`make test` runs the feature tests twice: once as they are (no MindSpeed: the fallback), and once in the
upstream session with MindSpeed and the CPU Ascend implementation on the path (`FCP_EXPECT_MINDSPEED=1`),
where the features manager, the feature base class and every patch go through MindSpeed's real classes.
"""
from __future__ import annotations

import os

import pytest

from mindspeed_mm_fcp import mindspeed_fallback
from mindspeed_mm_fcp.mindspeed_compat import USING_MINDSPEED, MindSpeedPatchesManager

EXPECT_MINDSPEED = os.environ.get("FCP_EXPECT_MINDSPEED") == "1"

PATCH_MANAGERS = [pytest.param(mindspeed_fallback.MindSpeedPatchesManager, id="fallback")]
if USING_MINDSPEED:
    PATCH_MANAGERS.append(pytest.param(MindSpeedPatchesManager, id="mindspeed"))


def registered_targets(manager) -> set[str]:
    """Targets with a replacement or a wrapper registered (MindSpeed keeps emptied entries after removal)."""
    targets = set()
    for name, patch in manager.patches_info.items():
        replacement = getattr(patch, "patch_func", None) or getattr(patch, "replacement", None)
        if replacement is not None or patch.wrappers:
            targets.add(name)
    return targets

