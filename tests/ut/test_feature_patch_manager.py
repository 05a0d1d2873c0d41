"""The fallback patch manager: wrapper vs replacement semantics, rebinding of imported names, undo."""
import sys
import types

import pytest

from mindspeed_mm.features_manager.fcp.mindspeed_fallback import MindSpeedPatchesManager


@pytest.fixture()
def target_module():
    module = types.ModuleType("fcp_patch_target")

    def add(a, b):
        return a + b

    class Greeter:
        def hello(self):
            return "hello"

    module.add, module.Greeter = add, Greeter
    consumer = types.ModuleType("fcp_patch_consumer")
    consumer.add = add  # as if it did `from fcp_patch_target import add`
    sys.modules[module.__name__], sys.modules[consumer.__name__] = module, consumer
    yield module, consumer
    MindSpeedPatchesManager.remove_all_patches()
    del sys.modules[module.__name__], sys.modules[consumer.__name__]


def test_wrapper_wraps_and_replacement_replaces(target_module):
    module, consumer = target_module
    original_add = module.add

    def add_wrapper(fn):
        def wrapped(a, b):
            return 10 * fn(a, b)
        return wrapped

    def hello(self):
        return "patched"

    MindSpeedPatchesManager.register_patch("fcp_patch_target.add", add_wrapper)
    MindSpeedPatchesManager.register_patch("fcp_patch_target.Greeter.hello", hello)
    MindSpeedPatchesManager.apply_patches()
    assert module.add(1, 2) == 30
    assert consumer.add(1, 2) == 30, "names imported elsewhere must see the patch"
    assert module.Greeter().hello() == "patched"

    MindSpeedPatchesManager.apply_patches()  # applying twice must not wrap twice
    assert module.add(1, 2) == 30

    MindSpeedPatchesManager.remove_all_patches()
    assert module.add is original_add and consumer.add is original_add
    assert module.Greeter().hello() == "hello"


def test_conflicting_registration_needs_force(target_module):
    MindSpeedPatchesManager.register_patch("fcp_patch_target.add", lambda a, b: 0)
    with pytest.raises(RuntimeError, match="fcp_patch_target.add"):
        MindSpeedPatchesManager.register_patch("fcp_patch_target.add", lambda a, b: 1)
    MindSpeedPatchesManager.register_patch("fcp_patch_target.add", lambda a, b: 1, force_patch=True)
    MindSpeedPatchesManager.apply_patches()
    assert target_module[0].add(5, 5) == 1


def test_unknown_target_is_named(target_module):
    MindSpeedPatchesManager.register_patch("fcp_patch_target.missing", lambda: None)
    with pytest.raises(AttributeError, match="fcp_patch_target.missing"):
        MindSpeedPatchesManager.apply_patches()
    MindSpeedPatchesManager.patches_info.clear()
    MindSpeedPatchesManager.register_patch("no_such_package_xyz.mod.fn", lambda: None)
    with pytest.raises(ModuleNotFoundError, match="no_such_package_xyz"):
        MindSpeedPatchesManager.apply_patches()
    MindSpeedPatchesManager.patches_info.clear()


def test_removal_leaves_the_replacement_in_its_own_module(target_module):
    """The module that defines a replacement under the patched name must keep it after removal."""
    module, consumer = target_module
    original_add = module.add
    provider = types.ModuleType("fcp_patch_provider")

    def add(a, b):
        return a - b

    provider.add = add
    sys.modules[provider.__name__] = provider
    try:
        for _ in range(2):  # apply, remove, and apply again
            MindSpeedPatchesManager.register_patch("fcp_patch_target.add", provider.add)
            MindSpeedPatchesManager.apply_patches()
            assert module.add(5, 3) == 2 and consumer.add(5, 3) == 2
            MindSpeedPatchesManager.remove_all_patches()
            assert module.add is original_add and consumer.add is original_add
            assert provider.add is add
    finally:
        del sys.modules[provider.__name__]
