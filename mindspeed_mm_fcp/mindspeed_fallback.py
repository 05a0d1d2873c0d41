"""Stand-ins for MindSpeed's feature base class and patch manager, used only when `mindspeed` is absent.

MindSpeed (and `torch_npu`, which it needs) cannot be installed on a machine without the Ascend toolkit,
but the FCP feature must still register its arguments, validate them and patch Megatron there (CPU
development, CI). These classes reproduce the part of MindSpeed's interface FCP relies on:

- ``MindSpeedFeature``: ``register_args``, ``pre_validate_args``, ``validate_args``,
  ``post_validate_args``, ``pre_register_patches``, ``register_patches``, ``is_need_apply``,
  ``incompatible_check``, ``dependency_check`` and the static ``add_parser_argument_choices_value``.
- ``MindSpeedPatchesManager``: ``register_patch(target, new_obj, force_patch=False)``, ``apply_patches()``
  and ``remove_patches()``; an object whose name ends in ``wrapper`` or ``decorator`` wraps the
  original (several stack), anything else replaces it. Modules that imported the original by name see
  the result too.
- ``MindSpeedFeaturesManager``: ``FEATURES_LIST`` and the stage methods that run every feature's
  hooks (``register_features_args``, ``pre_validate_features_args``, ``validate_features_args``,
  ``post_validate_features_args``, ``apply_features_patches``).

When the real packages are importable, :mod:`.mindspeed_compat` uses them instead.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

logger = logging.getLogger(__name__)


class MindSpeedFeature:
    """Base class of a switchable training feature (fallback of ``mindspeed.features_manager``)."""

    def __init__(self, feature_name: str, optimization_level: int = 2):
        self.feature_name = feature_name.strip().replace("-", "_")
        self.optimization_level = optimization_level
        self.default_patches = self.optimization_level == 0

    def is_need_apply(self, args: argparse.Namespace) -> bool:
        return bool(getattr(args, self.feature_name, None))

    def register_args(self, parser: argparse.ArgumentParser) -> None:
        pass

    def pre_validate_args(self, args: argparse.Namespace) -> None:
        pass

    def validate_args(self, args: argparse.Namespace) -> None:
        pass

    def post_validate_args(self, args: argparse.Namespace) -> None:
        pass

    def pre_register_patches(self, patch_manager: Any, args: argparse.Namespace) -> None:
        pass

    def register_patches(self, patch_manager: Any, args: argparse.Namespace) -> None:
        pass

    def incompatible_check(self, global_args: argparse.Namespace, check_args: str) -> None:
        if getattr(global_args, self.feature_name, None) and getattr(global_args, check_args, None):
            raise AssertionError(f"{self.feature_name} and {check_args} are incompatible.")

    def dependency_check(self, global_args: argparse.Namespace, check_args: str) -> None:
        if getattr(global_args, self.feature_name, None) and not getattr(global_args, check_args, None):
            raise AssertionError(f"{self.feature_name} requires {check_args}.")

    @staticmethod
    def add_parser_argument_choices_value(parser: argparse.ArgumentParser, argument_name: str,
                                          new_choice: str) -> None:
        """Add ``new_choice`` to the choices of an already registered option; no-op if it is absent."""
        for action in parser._actions:  # argparse keeps no public registry of actions
            if argument_name in action.option_strings:
                if action.choices is not None and new_choice not in action.choices:
                    action.choices = [*action.choices, new_choice]
                return


@dataclass
class _Patch:
    target: str
    replacement: Any = None
    wrappers: list[Any] = field(default_factory=list)
    original: Any = None
    applied: Any = None
    """The object installed by the last apply (None before it)."""
    rebound_modules: list[Any] = field(default_factory=list)
    dirty: bool = True
    """Registered since the last apply."""


def _is_wrapper(new_obj: Any) -> bool:
    """MindSpeed's rule: a callable named ``*wrapper`` or ``*decorator`` wraps the original."""
    return getattr(new_obj, "__name__", "").endswith(("wrapper", "decorator"))


def _resolve(dotted: str) -> tuple[Any, str]:
    """Split ``pkg.mod.Cls.attr`` into (owner object, attribute name), importing the module part."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:-1]:
            owner = getattr(owner, name)
        attr = parts[-1]
        if not hasattr(owner, attr):
            raise AttributeError(f"patch target {dotted!r}: {owner!r} has no attribute {attr!r}")
        return owner, attr
    raise ModuleNotFoundError(f"patch target {dotted!r}: no importable module prefix")


class MindSpeedPatchesManager:
    """Registry of monkey patches applied in one go (fallback of ``mindspeed.patch_utils``).

    As in MindSpeed: one replacement per target (a second one needs ``force_patch``), any number of
    wrappers stacked over it in registration order (a wrapper registered twice counts once), and
    ``apply_patches`` may run again after new registrations.
    """

    patches_info: ClassVar[dict[str, _Patch]] = {}

    @classmethod
    def register_patch(cls, orig_func_name: str, new_func: Any = None, force_patch: bool = False) -> None:
        if new_func is None:
            raise ValueError(f"patch target {orig_func_name!r}: no replacement given (dummy patches are not "
                             "supported without MindSpeed)")
        patch = cls.patches_info.setdefault(orig_func_name, _Patch(orig_func_name))
        if _is_wrapper(new_func):
            if new_func not in patch.wrappers:
                patch.wrappers.append(new_func)
        elif patch.replacement is not None and not force_patch:
            raise RuntimeError(f"the patch of {orig_func_name} exist !")
        else:
            patch.replacement = new_func
        patch.dirty = True

    @classmethod
    def apply_patches(cls) -> None:
        for patch in cls.patches_info.values():
            if not patch.dirty:
                continue
            owner, attr = _resolve(patch.target)
            current = getattr(owner, attr)
            if patch.applied is None or current is not patch.applied:
                patch.original = current
            final = patch.replacement if patch.replacement is not None else patch.original
            for wrapper in patch.wrappers:
                final = wrapper(final)
            replaced = patch.applied if patch.applied is not None else patch.original
            setattr(owner, attr, final)
            patch.rebound_modules += _rebind_imported_names(replaced, final, attr)
            patch.applied = final
            patch.dirty = False
            logger.debug("patched %s", patch.target)

    @classmethod
    def remove_patches(cls) -> None:
        """Undo every applied patch, newest first, and forget them (tests use it to restore Megatron)."""
        for patch in reversed(list(cls.patches_info.values())):
            if patch.applied is not None:
                owner, attr = _resolve(patch.target)
                if getattr(owner, attr) is patch.applied:
                    setattr(owner, attr, patch.original)
                # Only the modules rebound at apply time: the module defining the replacement keeps it.
                for module in patch.rebound_modules:
                    if getattr(module, attr, None) is patch.applied:
                        setattr(module, attr, patch.original)
        cls.patches_info.clear()


def _rebind_imported_names(old: Any, new: Any, attr: str) -> list[Any]:
    """Modules that did ``from x import name`` hold the old object: point them at the new one; returns them."""
    rebound = []
    for module in list(sys.modules.values()):
        try:
            with warnings.catch_warnings():  # reading deprecated module attributes warns
                warnings.simplefilter("ignore")
                holds_old = module is not None and getattr(module, attr, None) is old
        except Exception:  # some modules compute attributes lazily and may raise anything
            continue
        if holds_old:
            setattr(module, attr, new)
            rebound.append(module)
    return rebound


class MindSpeedFeaturesManager:
    """Ordered list of features and the stages MindSpeed runs them in (fallback of
    ``mindspeed.features_manager.features_manager``).

    As in MindSpeed, argument registration and the three validation stages reach every feature;
    each feature's hooks decide for themselves whether they apply. Patches are registered only by
    features whose ``is_need_apply`` is true.
    """

    FEATURES_LIST: ClassVar[list[MindSpeedFeature]] = []

    @classmethod
    def register_features_args(cls, parser: argparse.ArgumentParser) -> None:
        for feature in cls.FEATURES_LIST:
            feature.register_args(parser)

    @classmethod
    def pre_validate_features_args(cls, args: argparse.Namespace) -> None:
        for feature in cls.FEATURES_LIST:
            feature.pre_validate_args(args)

    @classmethod
    def validate_features_args(cls, args: argparse.Namespace) -> None:
        for feature in cls.FEATURES_LIST:
            feature.validate_args(args)

    @classmethod
    def post_validate_features_args(cls, args: argparse.Namespace) -> None:
        for feature in cls.FEATURES_LIST:
            feature.post_validate_args(args)

    @classmethod
    def apply_features_pre_patches(cls, args: argparse.Namespace) -> None:
        for feature in cls.FEATURES_LIST:
            if feature.is_need_apply(args):
                feature.pre_register_patches(MindSpeedPatchesManager, args)
        MindSpeedPatchesManager.apply_patches()

    @classmethod
    def apply_features_patches(cls, args: argparse.Namespace) -> None:
        for feature in cls.FEATURES_LIST:
            if feature.is_need_apply(args):
                feature.register_patches(MindSpeedPatchesManager, args)
        MindSpeedPatchesManager.apply_patches()

    @classmethod
    def remove_patches(cls) -> None:
        MindSpeedPatchesManager.remove_patches()
