"""Importing this module adds the FCP feature to MindSpeed's features list.

It must run before ``import mindspeed.megatron_adaptor``, which parses the command line and applies
every listed feature. It imports what the adaptor imports first (``torch_npu``'s device mapping, then
MindSpeed's features), in the adaptor's order, and nothing of ``mindspeed_mm``.
"""
from __future__ import annotations

from typing import Any

from .mindspeed_compat import USING_MINDSPEED

if USING_MINDSPEED:
    from torch_npu.contrib import transfer_to_npu  # noqa: F401  (the adaptor's first import, kept first)

from .feature import FCPFeature
from .mindspeed_compat import MindSpeedFeature, MindSpeedFeaturesManager


def add_fcp_feature(features_list: list[MindSpeedFeature]) -> list[MindSpeedFeature]:
    """Appends the FCP feature to `features_list` unless it is already there; returns the list."""
    if not any(isinstance(feature, FCPFeature) for feature in features_list):
        features_list.append(FCPFeature())
    return features_list


def enable_fcp(manager: Any = MindSpeedFeaturesManager) -> list[MindSpeedFeature]:
    """Adds the FCP feature, last, to the features list of `manager` (MindSpeed's features manager by default).

    Last, because ``--context-parallel-algo`` is registered by MindSpeed's context-parallel features and FCP
    adds its choice to it.
    """
    if not isinstance(getattr(manager, "FEATURES_LIST", None), list):
        raise TypeError(f"{manager!r} has no FEATURES_LIST to add the FCP feature to")
    return add_fcp_feature(manager.FEATURES_LIST)


enable_fcp()

__all__ = ["FCPFeature", "add_fcp_feature", "enable_fcp"]
