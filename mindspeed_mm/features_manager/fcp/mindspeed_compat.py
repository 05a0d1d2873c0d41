"""MindSpeed's feature base class, features manager and patch manager: the real ones, else the fallback."""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

try:
    from mindspeed.features_manager import MindSpeedFeature
    from mindspeed.features_manager.features_manager import MindSpeedFeaturesManager
    from mindspeed.patch_utils import MindSpeedPatchesManager

    USING_MINDSPEED = True
except ImportError:
    from .mindspeed_fallback import MindSpeedFeature, MindSpeedFeaturesManager, MindSpeedPatchesManager

    USING_MINDSPEED = False
    logger.debug("mindspeed is not importable: using FCP's fallback feature base and patch manager")

__all__ = ["MindSpeedFeature", "MindSpeedFeaturesManager", "MindSpeedPatchesManager", "USING_MINDSPEED"]
