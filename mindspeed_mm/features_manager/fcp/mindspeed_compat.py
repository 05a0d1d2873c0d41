"""MindSpeed's feature base class and patch manager: the real ones when importable, else the fallback."""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

try:
    from mindspeed.features_manager import MindSpeedFeature
    from mindspeed.patch_utils import MindSpeedPatchesManager

    USING_MINDSPEED = True
except ImportError:
    from .mindspeed_fallback import MindSpeedFeature, MindSpeedPatchesManager

    USING_MINDSPEED = False
    logger.debug("mindspeed is not importable: using FCP's fallback feature base and patch manager")

__all__ = ["MindSpeedFeature", "MindSpeedPatchesManager", "USING_MINDSPEED"]
