"""MindSpeed's feature base class, features manager and patch manager: the real ones, else the fallback.

The fallback is used only where the ``mindspeed`` package is absent. Where it is present but fails to
import (``torch_npu`` missing, a broken install), the import error is raised: silently training with
the stand-ins would hide that MindSpeed's own features are not running.
"""
from __future__ import annotations

import importlib.util
import logging

logger = logging.getLogger(__name__)


def mindspeed_installed() -> bool:
    """True when a ``mindspeed`` package can be found on the path."""
    try:
        return importlib.util.find_spec("mindspeed") is not None
    except (ImportError, ValueError):
        return False


USING_MINDSPEED = mindspeed_installed()

if USING_MINDSPEED:
    from mindspeed.features_manager import MindSpeedFeature
    from mindspeed.features_manager.features_manager import MindSpeedFeaturesManager
    from mindspeed.patch_utils import MindSpeedPatchesManager
else:
    from .mindspeed_fallback import MindSpeedFeature, MindSpeedFeaturesManager, MindSpeedPatchesManager

    logger.debug("mindspeed is not installed: using FCP's fallback feature base and patch manager")

__all__ = ["MindSpeedFeature", "MindSpeedFeaturesManager", "MindSpeedPatchesManager", "USING_MINDSPEED",
           "mindspeed_installed"]
