"""Registration of MindSpeed-MM's FCP feature with MindSpeed's feature manager.

The one line an entry script (for example ``pretrain_transformers.py``) needs, placed before
``import mindspeed.megatron_adaptor``::

    import mindspeed_mm.features_manager.register_fcp  # noqa: F401  (adds FCPFeature to MindSpeed's features)

A script that builds its own features list adds FCP with ``add_fcp_feature(features_list)``, as
MindSpeed-LLM's ``add_*_features`` functions do.
"""
from __future__ import annotations

from typing import Any

from mindspeed_mm.features_manager.fcp import FCPFeature
from mindspeed_mm.features_manager.fcp.mindspeed_compat import MindSpeedFeature, MindSpeedFeaturesManager


def create_fcp_features_list() -> list[MindSpeedFeature]:
    """The features this package contributes, in registration order."""
    return [FCPFeature()]


def add_fcp_feature(features_list: list[MindSpeedFeature]) -> list[MindSpeedFeature]:
    """Appends the FCP feature to `features_list` unless it is already there; returns the list."""
    if not any(isinstance(feature, FCPFeature) for feature in features_list):
        features_list.extend(create_fcp_features_list())
    return features_list


def enable_fcp(manager: Any = MindSpeedFeaturesManager) -> list[MindSpeedFeature]:
    """Adds the FCP feature to the features list of `manager` (MindSpeed's features manager by default).

    Must run before MindSpeed parses arguments and applies patches (``import mindspeed.megatron_adaptor``).
    """
    if not isinstance(getattr(manager, "FEATURES_LIST", None), list):
        raise TypeError(f"{manager!r} has no FEATURES_LIST to add the FCP feature to")
    return add_fcp_feature(manager.FEATURES_LIST)


__all__ = ["FCPFeature", "add_fcp_feature", "create_fcp_features_list", "enable_fcp"]
